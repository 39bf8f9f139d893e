# ruff: noqa: E501 - the corpus is prose: one turn or question a line reads best
"""The scripted parts of ``bench/retrieval_corpus.py``: what each of the 24 sessions is about,
the facts said in it (each tagged), and the questions asked about them, naming their evidence
by tag. Fixed text, written for this bench."""

from __future__ import annotations

# --- the scripted sessions ---------------------------------------------------------------------
# Each session: (date, start time, episodes). An episode is a list of (speaker, tag, text) turns;
# a one-turn episode gets a short reaction from the other person. Tags label evidence turns.

# fmt: off
SCRIPT: list[tuple[str, str, list[list[tuple[str, str, str]]]]] = [
    ("2024-03-04", "19:40", [
        [
            ("R", "dog_lead", "Biscuit chewed through his lead again this morning, that's the third one this year."),
            ("M", "", "Beagles. They are tiny criminals with lovely ears."),
        ],
        [("M", "mei_job", "I've started on the night rota at the Royal Infirmary, four nights on and four off.")],
        [
            ("R", "boat", "We finally took the boat out to the lake on Saturday. Dad's old dinghy, and it still floats!"),
            ("M", "", "Did anyone fall in?"),
            ("R", "boat_lake", "Nobody fell in, but Dad insisted on rowing the whole way round Eccup reservoir."),
        ],
        [("M", "priya_moving", "My flatmate Priya is moving out at the end of the month, so I'm hunting for someone to take her room.")],
    ]),
    ("2024-03-07", "20:15", [
        [("R", "pottery", "I signed up for a pottery class at the community centre, it's on Thursday evenings.")],
        [
            ("M", "kenji_engaged", "Big news from my family: Kenji proposed to Sol at the weekend, right on top of Arthur's Seat."),
            ("R", "", "That's so romantic! Give your brother my congratulations."),
        ],
        [("R", "harrogate", "The bearing inspection on the Harrogate viaduct got pushed back to April, which is a relief honestly.")],
        [("M", "ramen", "I've basically been living on instant noodles. The corner shop sells a spicy miso one that's dangerously good.")],
    ]),
    ("2024-03-11", "18:50", [
        [
            ("R", "twins", "Anjali's twins turned six on Sunday, we threw them a dinosaur party in her garden."),
            ("M", "", "Six already! Did you dress up as a T-rex?"),
            ("R", "", "Obviously. The costume was far too hot."),
        ],
        [
            ("M", "ankle", "I went over on my ankle on the stairs at work, so now I'm hobbling about like a pirate."),
            ("R", "", "Ouch! Ice and feet up, nurse's orders."),
        ],
        [("R", "klara", "I'm halfway through Klara and the Sun, the one you lent me. It's quietly heartbreaking so far.")],
        [("M", "tomas", "Good news on the room though: a PhD student called Tomás is taking it. He studies glaciers, of all things.")],
    ]),
    ("2024-03-14", "21:05", [
        [
            ("R", "boiler", "The landlord finally sent someone to fix the boiler, after three weeks of cold showers."),
            ("M", "", "Three weeks! I'd have moved into a hotel."),
        ],
        [
            ("M", "wedding_date", "Kenji and Sol have set a date: the fourteenth of September, in Kyoto!"),
            ("R", "", "Kyoto in September sounds perfect. Are you going?"),
            ("M", "", "Wouldn't miss it. Mum is already planning outfits."),
        ],
        [
            ("R", "bowl", "My first bowl at the class collapsed completely. The teacher said I used far too much water on the wheel."),
            ("M", "", "Everyone's first bowl collapses, it's tradition."),
        ],
        [("M", "run_plan", "I've decided to train for the Great Manchester Run in May. Ten kilometres, me, who gets out of breath on the stairs.")],
    ]),
    ("2024-03-18", "19:20", [
        [("R", "vet", "Biscuit had his check-up at the vet's. Healthy, but apparently he's two kilos overweight.")],
        [("M", "mum_visit", "My mum is coming over from Taipei for two weeks in April, first visit since Christmas 2022.")],
        [
            ("R", "rotterdam_plan", "Work wants me in the Rotterdam office for a week, to look at their storm surge barrier project."),
            ("M", "", "Ooh, a work trip. Bring me back something Dutch."),
        ],
        [("M", "cheese", "Tomás came back from a conference in Bern with an entire wheel of cheese. Our fridge smells incredible and terrible.")],
    ]),
    ("2024-03-22", "20:30", [
        [
            ("R", "bristol_offer", "So, a firm in Bristol has offered me a senior engineer role. I'd be working on the new harbour footbridge."),
            ("M", "", "WHAT. That's huge! Are you going to take it?"),
            ("R", "pay", "I'm torn. I love Leeds, but the salary is about eighteen percent more."),
        ],
        [("M", "8km", "Ran eight kilometres without stopping for the first time today, I nearly cried at the end.")],
        [("M", "housewarming", "Priya invited me to her housewarming in Salford on the 30th.")],
    ]),
    ("2024-03-26", "19:10", [
        [
            ("R", "bristol_yes", "I said yes to Bristol! I start on the 6th of May."),
            ("M", "", "I'm so proud of you. Also you have to visit Manchester before you disappear down south."),
        ],
        [("M", "ankle_ok", "The ankle's all healed, the physio signed me off this morning.")],
        [("R", "klara_done", "Finished the Ishiguro on the train home and the ending absolutely wrecked me.")],
        [("M", "flights", "I booked my flights for the wedding, Manchester to Osaka with a change in Helsinki.")],
    ]),
    ("2024-03-30", "11:45", [
        [("R", "rotterdam_done", "Back from the Netherlands. The Maeslantkering is absolutely enormous up close, the arms are longer than the Eiffel Tower is tall.")],
        [("M", "terrace", "Priya's new place has a roof terrace, we stayed up there until two.")],
        [
            ("R", "stroopwafel", "I ate far too many stroopwafels and brought a tin back for the office."),
            ("M", "", "Where's MY tin, Ravi."),
        ],
        [("M", "spare_room", "Mum lands on Tuesday, I've turned the box room into a little guest room for her.")],
    ]),
    ("2024-04-03", "20:00", [
        [("R", "gareth", "I told the team I'm leaving. Gareth, my manager, took it surprisingly well, he even offered to be a reference.")],
        [("M", "whitworth", "Took Mum to the Whitworth, she spent an hour in the textiles exhibition.")],
        [("R", "mugs", "My teacher says my mugs are finally not wonky. Progress!")],
        [
            ("M", "dumplings", "Mum has been teaching Tomás to fold dumplings and the kitchen is covered in flour."),
            ("R", "", "Please tell me there are leftovers."),
        ],
    ]),
    ("2024-04-07", "18:30", [
        [("R", "bedminster", "Went flat hunting down south yesterday. Saw a place in Bedminster with a tiny garden, Biscuit would love it.")],
        [
            ("M", "mum_left", "Mum flew home on Saturday, the flat feels weirdly quiet without her."),
            ("R", "", "Aw. Quiet can be nice for a few days, though."),
        ],
        [("R", "harrogate_done", "The viaduct inspection finally happened. The bearings need replacing, so that's a summer job for someone else now.")],
        [("M", "japanese", "I've started learning Japanese properly with an app, and Kenji quizzes me every evening.")],
    ]),
    ("2024-04-11", "21:20", [
        [
            ("R", "lease", "I signed the lease on the Bedminster flat! It's 1,150 a month, which is a lot less scary than London."),
            ("M", "", "Congratulations! Send pictures of the garden."),
        ],
        [("M", "parkrun", "Parkrun this morning in 27:40, a personal best by almost a minute.")],
        [("R", "biscuit_sitter", "Anjali is going to look after Biscuit while I move, so he doesn't have to watch me pack.")],
        [("M", "hana", "I think Tomás has a girlfriend. A marine biologist called Hana keeps appearing at breakfast.")],
    ]),
    ("2024-04-15", "19:55", [
        [("R", "leaving_do", "My leaving do was at the Adelphi. Gareth gave a speech about my terrible puns.")],
        [
            ("M", "altrincham", "Nights are killing me. I fell asleep on the tram and woke up in Altrincham."),
            ("R", "", "Oh no, that's miles past your stop."),
        ],
        [
            ("R", "boxes", "Forty boxes packed and I still haven't started on the kitchen."),
            ("M", "", "Leave the kitchen for last, that's what takeaways are for."),
        ],
        [
            ("M", "brooks", "I've switched to the trainers the running shop recommended, Brooks Ghosts, and my knees are much happier."),
            ("R", "", "Happy knees are everything."),
        ],
    ]),
    ("2024-04-20", "20:40", [
        [("R", "move_plan", "The removal van comes on Thursday, then I drive down with Biscuit on Friday.")],
        [
            ("M", "speech", "Kenji asked me to give a speech at the wedding and I'm terrified."),
            ("R", "", "You'll be great. Just don't mention the karaoke."),
        ],
        [("R", "teapot", "Last class tonight. I'm taking home a teapot with a very dodgy spout.")],
        [("M", "dress", "I bought a dress for the wedding, dark green silk, and I feel like a film star in it.")],
    ]),
    ("2024-04-26", "18:15", [
        [
            ("R", "bristol_now", "Officially a Bristolian now! The new flat still smells of fresh paint."),
            ("M", "", "Welcome to the south. How's the garden?"),
        ],
        [("M", "ceilidh", "Went to a ceilidh with Tomás and Hana last night, I'm covered in bruises.")],
        [("R", "puddle", "Biscuit has already found the muddiest puddle in Victoria Park.")],
        [("M", "cardiac", "Work has offered me a move to days on the cardiac ward from June.")],
    ]),
    ("2024-05-02", "19:30", [
        [("R", "climbing", "There's a bouldering wall ten minutes from the flat, I did a taster session and my forearms are jelly.")],
        [
            ("M", "cardiac_yes", "I said yes to the cardiac ward! No more nights after the end of May."),
            ("R", "", "Finally, you can see daylight again."),
        ],
        [("R", "unpacked", "Still living out of boxes but the bed and the kettle are sorted, which is what matters.")],
        [("M", "tomas_ski", "Tomás is off to Svalbard for fieldwork in the summer, he's absurdly excited about it.")],
    ]),
    ("2024-05-08", "20:10", [
        [("R", "firm", "First days at Hollis & Crane. My desk looks straight out over the harbour.")],
        [
            ("M", "dentist", "A tooth has been aching all week, I've got a dentist appointment on Friday."),
            ("R", "", "Poor you. Salt water rinses in the meantime."),
        ],
        [
            ("R", "femi", "There's a colleague, Femi, who also has a beagle, so we're planning a dog walk."),
            ("M", "", "A beagle play date! I need photos."),
        ],
        [("M", "brownies", "Priya and I are doing a bake sale for the ward, I made matcha brownies.")],
    ]),
    ("2024-05-12", "17:45", [
        [("R", "great_britain", "Anjali brought the twins down for the weekend, they loved the SS Great Britain.")],
        [
            ("M", "filling", "The dentist says I need a filling, which is fine, I was expecting worse."),
            ("R", "", "Could be worse, at least it's sorted."),
        ],
        [("R", "climb_5c", "Went back to the wall and got up my first 5c route.")],
        [("M", "bake_money", "The bake sale raised 340 pounds for the ward's family room.")],
    ]),
    ("2024-05-16", "20:50", [
        [
            ("M", "run_nerves", "The big run is on Sunday and I'm a bundle of nerves."),
            ("R", "", "You've trained for months, you'll smash it."),
        ],
        [("R", "studio", "I joined a ceramics studio in Stokes Croft so I can keep throwing pots.")],
        [
            ("M", "seating", "Kenji sent me the seating plan. I'm next to Sol's grandmother, who only speaks Spanish."),
            ("R", "", "Time to learn more than hola, then."),
        ],
        [("R", "review", "The design review for the footbridge is next Tuesday, my first big presentation here.")],
    ]),
    ("2024-05-20", "19:05", [
        [("M", "run_done", "I did it! 58 minutes for the 10k, and I cried at the finish line.")],
        [("R", "leigh_woods", "Femi and I took both beagles to Leigh Woods, and Biscuit rolled in something unspeakable.")],
        [
            ("M", "tomas_out", "Tomás is moving in with Hana next month, so I'm looking for someone to share with again."),
            ("R", "", "The flatmate carousel continues."),
        ],
        [
            ("M", "hot_bath", "My legs are so stiff today I had to go down the stairs backwards."),
            ("R", "", "That's the sign of a proper race. Hot bath tonight."),
        ],
    ]),
    ("2024-05-24", "21:00", [
        [("R", "review_done", "The design review went well, the client went with the lighter steel deck.")],
        [("M", "japanese_progress", "My Japanese is slow going, but I can now order food without pointing.")],
        [("R", "parents", "My parents are coming down from Leeds in June, Dad wants to see the docks.")],
        [("M", "priya_back", "Priya might move back in once Tomás has gone, her Salford landlord is selling up.")],
    ]),
    ("2024-05-29", "20:20", [
        [("R", "cornwall", "We booked a week in Cornwall with Anjali's family for August, a cottage near St Ives.")],
        [("M", "last_night", "My last ever night shift is on Friday, I'm bringing cake for the whole team.")],
        [("R", "weight_loss", "Biscuit has lost a kilo thanks to all the walks with Femi's dog.")],
        [("M", "speech_draft", "Wrote the first draft of the wedding speech, it's mostly embarrassing childhood stories about my brother.")],
    ]),
    ("2024-06-03", "19:15", [
        [("M", "cardiac_start", "First day shift on the new ward today. I saw actual sunlight on my way home!")],
        [
            ("R", "kayak", "I bought a secondhand kayak, since the boat is still up north with Dad."),
            ("M", "", "Please wear a life jacket."),
        ],
        [("M", "priya_in", "Priya moved back in on Sunday, it's like old times.")],
        [("R", "football", "Femi talked me into five-a-side on Wednesday nights.")],
    ]),
    ("2024-06-08", "18:40", [
        [
            ("R", "kayak_out", "Took the kayak out on the harbour this morning and fell in twice."),
            ("M", "", "At least the harbour is warm in June. Is it?"),
        ],
        [("M", "ryokan", "I've booked a ryokan in Kyoto for after the wedding, with a private hot spring bath.")],
        [("R", "fruitbowl", "Finished my first piece at the studio, a big fruit bowl for Anjali's birthday.")],
        [("M", "accent", "My Japanese teacher says my accent sounds like a grandmother from Osaka.")],
    ]),
    ("2024-06-13", "20:35", [
        [
            ("R", "dinghy_sold", "Dad is selling the dinghy, apparently he wants a caravan now."),
            ("M", "", "The end of an era! Did you get one last trip?"),
        ],
        [("M", "kimono", "I reserved a rental kimono for the tea ceremony the day before the wedding.")],
        [("R", "bakery", "Bristol already feels like home. I even have a favourite bakery, Mark's Bread on North Street.")],
        [("M", "noodle", "Priya and I adopted a cat from the shelter, a grumpy tabby called Noodle.")],
    ]),
]
# fmt: on

# --- questions ---------------------------------------------------------------------------------
# (kind, question, evidence tags, answer). Worded as a friend would ask, mostly not in the words
# of the evidence.

# fmt: off
QUESTIONS: list[tuple[str, str, tuple[str, ...], str]] = [
    # single-hop
    ("single-hop", "What's the name of Ravi's dog?", ("dog_lead",), "Biscuit"),
    ("single-hop", "Which hospital does Mei work at?", ("mei_job",), "the Royal Infirmary"),
    ("single-hop", "Where did Ravi and his father go rowing?", ("boat_lake",), "Eccup reservoir"),
    ("single-hop", "Who was Mei sharing her flat with at the start?", ("priya_moving",), "Priya"),
    ("single-hop", "What evening class did Ravi join?", ("pottery",), "pottery, Thursdays"),
    ("single-hop", "Where did Kenji pop the question?", ("kenji_engaged",), "on Arthur's Seat"),
    ("single-hop", "What flavour of instant ramen is Mei hooked on?", ("ramen",), "spicy miso"),
    ("single-hop", "How old are Anjali's kids now?", ("twins",), "six"),
    ("single-hop", "What injury did Mei pick up at the hospital?", ("ankle",), "a twisted ankle"),
    ("single-hop", "What does Mei's new housemate research?", ("tomas",), "glaciers"),
    ("single-hop", "What went wrong with Ravi's first attempt on the wheel?", ("bowl",), "it collapsed, too much water"),
    ("single-hop", "Which race is Mei getting ready for?", ("run_plan",), "the Great Manchester Run"),
    ("single-hop", "What did the vet say about Biscuit's weight?", ("vet",), "two kilos overweight"),
    ("single-hop", "Where does Mei's mother live?", ("mum_visit",), "Taipei"),
    ("single-hop", "What did Tomás bring back from Switzerland?", ("cheese",), "a whole wheel of cheese"),
    ("single-hop", "What project would Ravi work on at the new job?", ("bristol_offer",), "the harbour footbridge"),
    ("single-hop", "How much of a pay rise was the new job?", ("pay",), "about 18 percent"),
    ("single-hop", "Where was Priya's housewarming?", ("housewarming",), "Salford"),
    ("single-hop", "What's Mei's route to Japan for the wedding?", ("flights",), "Manchester–Helsinki–Osaka"),
    ("single-hop", "What impressed Ravi most in the Netherlands?", ("rotterdam_done",), "the Maeslantkering"),
    ("single-hop", "What souvenir did Ravi bring for his colleagues?", ("stroopwafel",), "a tin of stroopwafels"),
    ("single-hop", "Who was Ravi's boss in Leeds?", ("gareth",), "Gareth"),
    ("single-hop", "Which museum did Mei take her mother to?", ("whitworth",), "the Whitworth"),
    ("single-hop", "What was Mei's mum teaching Tomás to cook?", ("dumplings",), "dumplings"),
    ("single-hop", "What's Ravi's rent in Bristol?", ("lease",), "1,150 a month"),
    ("single-hop", "What was Mei's parkrun time?", ("parkrun",), "27:40"),
    ("single-hop", "Who minded the dog during the move?", ("biscuit_sitter",), "Anjali"),
    ("single-hop", "What does Hana do for a living?", ("hana",), "marine biologist"),
    ("single-hop", "Which pub hosted Ravi's farewell drinks?", ("leaving_do",), "the Adelphi"),
    ("single-hop", "Which running shoes does Mei wear now?", ("brooks",), "Brooks Ghost"),
    ("single-hop", "What colour is Mei's outfit for Kenji's big day?", ("dress",), "dark green silk"),
    ("single-hop", "What's the name of Ravi's new employer?", ("firm",), "Hollis & Crane"),
    ("single-hop", "How much money did the ward fundraiser make?", ("bake_money",), "340 pounds"),
    ("single-hop", "Which attraction did Ravi's nieces and nephews enjoy in Bristol?", ("great_britain",), "the SS Great Britain"),
    ("single-hop", "Where is Tomás heading for his summer research?", ("tomas_ski",), "Svalbard"),
    ("single-hop", "Who will Mei be sitting beside at the reception?", ("seating",), "Sol's grandmother"),
    ("single-hop", "What was Mei's finishing time in the 10k?", ("run_done",), "58 minutes"),
    ("single-hop", "Which deck option did the client pick?", ("review_done",), "the lighter steel deck"),
    ("single-hop", "Where is Ravi going on holiday in August?", ("cornwall",), "Cornwall, near St Ives"),
    ("single-hop", "What kind of pet did Mei get?", ("noodle",), "a tabby cat called Noodle"),
    ("single-hop", "What does Mei's teacher think of her pronunciation?", ("accent",), "like a grandmother from Osaka"),
    ("single-hop", "Which bakery does Ravi like best?", ("bakery",), "Mark's Bread"),
    ("single-hop", "What is Ravi's dad buying instead of the boat?", ("dinghy_sold",), "a caravan"),
    # multi-hop: evidence in two different sessions
    ("multi-hop", "Which city did Ravi leave, and where did he end up living?", ("pay", "bristol_now"), "Leeds, then Bristol"),
    ("multi-hop", "Who has shared Mei's flat over these months?", ("priya_moving", "tomas"), "Priya, then Tomás"),
    ("multi-hop", "How long did Mei's ankle take to heal?", ("ankle", "ankle_ok"), "about two weeks"),
    ("multi-hop", "Did Ravi like the book Mei lent him?", ("klara", "klara_done"), "yes, the ending wrecked him"),
    ("multi-hop", "When and where is Kenji getting married, and to whom?", ("kenji_engaged", "wedding_date"), "Sol, 14 September, Kyoto"),
    ("multi-hop", "How did the Harrogate viaduct job turn out after the delay?", ("harrogate", "harrogate_done"), "inspected in April, bearings need replacing"),
    ("multi-hop", "Has Ravi's pottery improved since he started?", ("bowl", "mugs"), "yes: first bowl collapsed, later mugs not wonky"),
    ("multi-hop", "How did Mei's training go from the first long run to race day?", ("8km", "run_done"), "8 km without stopping, then 10k in 58 minutes"),
    ("multi-hop", "Which Bristol neighbourhood did Ravi choose, and what does it cost?", ("bedminster", "lease"), "Bedminster, 1,150 a month"),
    ("multi-hop", "Is Biscuit slimming down?", ("vet", "weight_loss"), "two kilos over, lost one"),
    ("multi-hop", "What happened with Mei's toothache?", ("dentist", "filling"), "dentist on Friday, needed a filling"),
    ("multi-hop", "How is Tomás's relationship with Hana going?", ("hana", "tomas_out"), "they are moving in together"),
    ("multi-hop", "Why is Priya moving back in with Mei?", ("priya_back", "tomas_out"), "Tomás leaves, her landlord is selling"),
    ("multi-hop", "How did Mei's shift pattern change over the spring?", ("mei_job", "cardiac_start"), "nights at the Royal Infirmary, then days on the cardiac ward"),
    ("multi-hop", "What's become of the family dinghy?", ("boat", "dinghy_sold"), "taken out on the lake, now being sold"),
    ("multi-hop", "How did Ravi's first presentation at the new firm go?", ("review", "review_done"), "went well, lighter deck chosen"),
    ("multi-hop", "Has Ravi kept up ceramics since moving?", ("teapot", "studio"), "yes, joined a studio in Stokes Croft"),
    ("multi-hop", "What were Mei's best running times this spring?", ("parkrun", "run_done"), "27:40 parkrun, 58 minute 10k"),
    ("multi-hop", "How is Ravi getting on with bouldering?", ("climbing", "climb_5c"), "taster session, then a 5c route"),
    ("multi-hop", "Where will Mei stay in Japan, and how is she getting there?", ("flights", "ryokan"), "flying via Helsinki to Osaka, a ryokan in Kyoto"),
    ("multi-hop", "How is Mei's Japanese coming along?", ("japanese", "japanese_progress"), "app and Kenji's quizzes; can order food"),
    ("multi-hop", "What has Mei prepared for her brother's wedding?", ("speech_draft", "kimono"), "a speech draft and a rental kimono"),
    ("multi-hop", "What has Ravi done with Femi outside work?", ("leigh_woods", "football"), "dog walks in Leigh Woods, five-a-side"),
    # temporal: the answer needs the date the evidence was said
    ("temporal", "When did Ravi take the boat out?", ("boat",), "the Saturday before 2024-03-04 (2 March 2024)"),
    ("temporal", "When did Mei start working nights?", ("mei_job",), "early March 2024 (said 2024-03-04)"),
    ("temporal", "When did Ravi enrol in his ceramics course?", ("pottery",), "2024-03-07"),
    ("temporal", "When did Mei hurt her foot?", ("ankle",), "around 2024-03-11"),
    ("temporal", "When did the twins have their birthday?", ("twins",), "Sunday 10 March 2024"),
    ("temporal", "When was Biscuit's check-up?", ("vet",), "around 2024-03-18"),
    ("temporal", "When did Ravi get the Bristol job offer?", ("bristol_offer",), "2024-03-22"),
    ("temporal", "When did Ravi accept the position?", ("bristol_yes",), "2024-03-26"),
    ("temporal", "When did Mei first manage eight kilometres?", ("8km",), "2024-03-22"),
    ("temporal", "When did Ravi get back from his work trip abroad?", ("rotterdam_done",), "around 2024-03-30"),
    ("temporal", "When did Ravi break the news to his team that he was leaving?", ("gareth",), "around 2024-04-03"),
    ("temporal", "When did Mei's mother head back to Taiwan?", ("mum_left",), "Saturday 6 April 2024"),
    ("temporal", "When did Ravi sign for his new place?", ("lease",), "2024-04-11"),
    ("temporal", "When did Mei get her parkrun PB?", ("parkrun",), "2024-04-11"),
    ("temporal", "When was Ravi's farewell party?", ("leaving_do",), "shortly before 2024-04-15"),
    ("temporal", "When did Ravi move into the Bristol flat?", ("bristol_now",), "by 2024-04-26"),
    ("temporal", "When was Mei offered the daytime job?", ("cardiac",), "2024-04-26"),
    ("temporal", "When did Ravi try climbing for the first time?", ("climbing",), "around 2024-05-02"),
    ("temporal", "When did Ravi start at Hollis & Crane?", ("firm",), "the week of 2024-05-06"),
    ("temporal", "When was the ward bake sale?", ("brownies",), "around 2024-05-08"),
    ("temporal", "When did Mei run the 10k?", ("run_done",), "Sunday 19 May 2024"),
    ("temporal", "When was Ravi's footbridge design review?", ("review",), "Tuesday 21 May 2024"),
    ("temporal", "When did Ravi book the Cornwall trip?", ("cornwall",), "2024-05-29"),
    ("temporal", "When did Mei do her first day shift?", ("cardiac_start",), "2024-06-03"),
    ("temporal", "When did Ravi capsize in the harbour?", ("kayak_out",), "the morning of 2024-06-08"),
    ("temporal", "When did Mei and Priya adopt their cat?", ("noodle",), "around 2024-06-13"),
    # open-domain
    ("open-domain", "Would Mei enjoy a bowl of spicy ramen?", ("ramen",), "yes, she loves spicy miso noodles"),
    ("open-domain", "Is Biscuit a well-behaved dog?", ("dog_lead",), "not really, he chews through leads"),
    ("open-domain", "Does Ravi have any nieces or nephews?", ("twins",), "yes, Anjali's twins"),
    ("open-domain", "Is Mei's brother likely to be married by autumn?", ("wedding_date",), "yes, in September"),
    ("open-domain", "Would Ravi be interested in big flood defence engineering?", ("rotterdam_done",), "yes, the storm surge barrier amazed him"),
    ("open-domain", "Does Ravi get along with his old manager?", ("gareth",), "yes, he offered a reference"),
    ("open-domain", "Is Ravi likely to feel sad about leaving Yorkshire?", ("pay",), "yes, he loves Leeds"),
    ("open-domain", "Is Mei comfortable speaking in public?", ("speech",), "no, she is terrified"),
    ("open-domain", "Does Ravi's family visit him after the move?", ("great_britain",), "yes, Anjali and the twins"),
    ("open-domain", "Is Mei a confident runner?", ("run_nerves",), "she gets nervous before races"),
    ("open-domain", "Would Mei's new colleagues see her at 3am anymore?", ("last_night",), "no, her last night shift is the end of May"),
    ("open-domain", "Does Ravi enjoy being on the water?", ("kayak",), "yes, he bought a kayak"),
    ("open-domain", "Is Ravi a careful paddler?", ("kayak_out",), "not really, he fell in twice"),
    ("open-domain", "Would a mug from Ravi make a good gift?", ("fruitbowl",), "yes, he makes ceramics as presents"),
    ("open-domain", "Does Mei have a pet to look after now?", ("noodle",), "yes, a cat"),
    ("open-domain", "Has Ravi settled in his new city?", ("bakery",), "yes, Bristol feels like home"),
    ("open-domain", "Is Mei tired of working overnight?", ("altrincham",), "yes, nights are killing her"),
    ("open-domain", "Does Mei bake?", ("brownies",), "yes, matcha brownies for the bake sale"),
    ("open-domain", "Is Ravi's new flat near green space?", ("puddle",), "yes, Victoria Park"),
]
# fmt: on
