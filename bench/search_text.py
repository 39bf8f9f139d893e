"""The messages of ``bench/memory_search.py``: English chit-chat generated from word lists with a
seeded random (Zipf-like word choice; names, places, numbers and times said in passing), the
questions asked, and the pool of distinct texts with their search terms and token counts."""

from __future__ import annotations

import random
from dataclasses import dataclass

BOT_MODEL = "openai/gpt-4o-mini"


# --- text ---------------------------------------------------------------------------------------


def _listed(text: str, separator: str = "|") -> list[str]:
    return text.split(separator)


# Word lists in rough order of how often people mention them; ``_pick`` draws with Zipf-like
# weights, so the head of each list is common and its tail rare.

NAMES = _listed(
    "Mum Dad Sam Priya Tom Anna Ravi Mei Jonas Lena Marco Chloe Omar Sofia Ben Hana Luis Ines "
    "Kofi Elif Nora Pavel Aiko Dario Freya Tariq Greta Yusuf Ingrid Mateo Zara Henrik Amara "
    "Bruno Leila Stefan Noor Felix Maya Emeka Saoirse Viktor Ottilie Rashid Beatriz Kenji",
    " ",
)
RELATIONS = _listed(
    "sister brother friend boss colleague neighbour cousin partner flatmate aunt uncle "
    "grandmother nephew niece landlord dentist coach teacher",
    " ",
)
PLACES = _listed(
    "the office|the park|the gym|the city centre|the supermarket|my parents' place|the beach|"
    "the lake|the mountains|the station|the library|the market|the river|the old town|"
    "the airport|the harbour|the stadium|the museum|the garden centre|the hospital|Lisbon|"
    "Berlin|the coast|Kyoto|Edinburgh|the countryside|Porto|Vienna|the ski resort|Marrakesh|"
    "the island|Copenhagen|the vineyard|Reykjavik|the campsite|Tallinn|the botanical garden|"
    "Valencia|the observatory|Ljubljana|the lighthouse|Oaxaca|the salt flats"
)
ACTIVITIES = _listed(
    "went for a run|cooked dinner|watched a film|cleaned the flat|went shopping|met friends|"
    "worked late|went for a walk|read a book|played football|visited my parents|did yoga|"
    "went swimming|baked bread|went cycling|played board games|painted the fence|went hiking|"
    "fixed the bike|went to a concert|took the boat out|planted tomatoes|went climbing|"
    "tried pottery|went fishing|built a shelf|went kayaking|learned some Spanish|"
    "went to a wedding|repaired the roof|went sailing|made sourdough|went birdwatching|"
    "did a triathlon|went skating|carved a spoon|went paragliding|brewed cider|"
    "restored an old radio|went snorkelling|knitted a scarf|went stargazing"
)
PLANS = _listed(
    "going to the gym|cooking more|visiting my parents|taking a holiday|changing jobs|"
    "moving house|learning the guitar|running a half marathon|buying a car|getting a dog|"
    "repainting the kitchen|starting a garden|booking a trip to Lisbon|learning to sail|"
    "taking a pottery class|adopting a cat|renovating the bathroom|hiking the coast path|"
    "joining a choir|buying a kayak|building a treehouse|learning Japanese|walking the Camino|"
    "entering a baking contest|restoring the piano|cycling to Porto"
)
FOODS = _listed(
    "pizza|pasta|curry|soup|salad|tacos|sushi|noodles|a roast|burgers|dumplings|paella|ramen|"
    "a stew|risotto|pancakes|falafel|lasagne|pho|a tagine|ceviche|pierogi|bibimbap|"
    "a fish pie|goulash|empanadas|laksa|moussaka|a sourdough loaf|okonomiyaki"
)
THINGS = _listed(
    "the car|the new phone|the laptop|the bike|the washing machine|the boat|the tickets|"
    "the keys|the passport|the camera|the tent|the guitar|the printer|the sofa|the kettle|"
    "the lawnmower|the kayak|the telescope|the sewing machine|the drone|the espresso machine|"
    "the canoe|the accordion|the metal detector|the pottery wheel|the record player"
)
FEELINGS = _listed(
    "tired|great|busy|stressed|happy|relaxed|exhausted|excited|bored|nervous|proud|grumpy|"
    "restless|homesick|elated|content|frazzled|nostalgic"
)
WORK = _listed(
    "the project|the deadline|the meeting|my manager|the new client|the budget|the report|"
    "the presentation|the team offsite|the quarterly review|the audit|the product launch|"
    "the migration|the hiring round|the conference talk|the merger|the grant application"
)
WHEN_PAST = _listed(
    "yesterday|last weekend|on Saturday|this morning|last night|on Sunday|last week|on Friday|"
    "on Monday|a few days ago|on Tuesday|on Thursday|on Wednesday|last month|over Easter|"
    "on my birthday|during the bank holiday|two weeks ago"
)
WHEN_FUTURE = _listed(
    "this weekend|next week|tomorrow|next month|on Saturday|in the summer|after work|"
    "on Friday|in spring|over Christmas|next year|in October"
)
ADJECTIVES = _listed(
    "nice|good|lovely|fun|great|busy|quiet|long|strange|perfect|rainy|cold|hot|expensive|"
    "relaxing|chaotic|memorable|disappointing|hilarious|peculiar|breathtaking|bittersweet"
)
FILLERS = _listed(
    "Honestly|Anyway|So|Well|Oh|By the way|To be fair|Funny thing|Guess what|Ugh|"
    "Good news|Quick update|Random thought|Long story short"
)

USER_TEMPLATES = (
    "{when_past} I {activity} with {name}.",
    "{filler}, {when_past} we {activity} near {place}.",
    "I'm {feeling} today, {work} is taking all my time.",
    "My {relation} {name} {activity} {when_past} and loved it.",
    "We had {food} at a little place near {place} {when_past}.",
    "I'm thinking about {plan} {when_future}.",
    "Do you remember {thing} I told you about? It broke again {when_past}.",
    "{filler}, {work} went {adjective} and I'm {feeling}.",
    "{name} and I are {plan} {when_future}, I'm {feeling} about it.",
    "It was a {adjective} day at {place}, we stayed until {hour}.",
    "I finally sold {thing} for {price} {when_past}.",
    "My {relation} called {when_past}, she wants to visit {place} {when_future}.",
    "Dinner {when_past} was {food}, {name} made it.",
    "The weather at {place} was {adjective}, so we {activity} instead.",
    "{filler}, I paid {price} for {thing}, was that too much?",
    "I need to remember to call {name} about {work} {when_future}.",
    "We {activity} for about {hours} hours {when_past}, my legs are {feeling}.",
    "I booked the train to {place} for {weekday} at {hour}.",
)
ASSISTANT_TEMPLATES = (
    "That sounds {adjective}! How was {place}?",
    "Oh nice, {food} is always a good choice. Who else was there?",
    "I hope {work} calms down soon. Have you talked to {name} about it?",
    "Sounds like a {adjective} weekend. Did {name} enjoy it too?",
    "{plan} {when_future} sounds great, what got you thinking about it?",
    "Sorry to hear about {thing}. Is it worth fixing, or time for a new one?",
    "I remember you mentioned {place} before. Was it as {adjective} as last time?",
    "Being {feeling} after all that makes sense. Take it easy tonight.",
    "{price} for {thing} seems fair to me. Are you happy with it?",
    "Say hi to your {relation} from me! When are they coming over?",
    "{hours} hours is a lot! What was the best part?",
    "Good luck with {work}. Let me know how it goes on {weekday}.",
)
WEEKDAYS = _listed("Monday Tuesday Wednesday Thursday Friday Saturday Sunday", " ")

# Fifty questions as a person would ask them, common and rare words mixed.
QUESTIONS = (
    "When did we talk about the boat trip?",
    "What did I do last weekend?",
    "How was work this week?",
    "When did I go kayaking?",
    "What did we have for dinner on Saturday?",
    "Did I tell you about the telescope?",
    "Who did I go hiking with?",
    "When is the train to Lisbon?",
    "What did my sister say about visiting?",
    "How much did I pay for the espresso machine?",
    "What happened with the project deadline?",
    "Did I ever make sourdough?",
    "When did I visit my parents?",
    "What was the weather like at the beach?",
    "Which restaurant did we go to near the harbour?",
    "Who made the goulash?",
    "Am I still thinking about getting a dog?",
    "When did the washing machine break?",
    "What did Priya think of the concert?",
    "How long did we go cycling for?",
    "What did I say about my manager?",
    "When did I go to the wedding?",
    "Did we ever go snorkelling in Marrakesh?",
    "What was so stressful about the audit?",
    "Where did I want to go in the summer?",
    "What did I sell the canoe for?",
    "When did we go stargazing at the observatory?",
    "Who is Henrik?",
    "What did I cook for Mum?",
    "How was the trip to Kyoto?",
    "Was the museum any good?",
    "When did I start learning Japanese?",
    "What did I think about the new client?",
    "Did I fix the bike in the end?",
    "What did we eat in Porto?",
    "Who called me about the hiring round?",
    "When did I feel homesick?",
    "What did my neighbour do on Sunday?",
    "How did the presentation go?",
    "Tell me about the time we went sailing",
    "What do you remember about the lighthouse?",
    "When did I buy the tickets?",
    "Did I mention the pottery class?",
    "What's the story with the metal detector?",
    "Who came to the park with me yesterday?",
    "When are we booking the trip?",
    "What did I say about moving house?",
    "How did the half marathon training go?",
    "Why was I so tired on Monday?",
    "What did Tariq bring to the campsite?",
)


def _weights(n: int, s: float = 1.05) -> list[float]:
    """Cumulative Zipf-like weights for a list of ``n`` in order of frequency."""
    total, out = 0.0, []
    for rank in range(1, n + 1):
        total += 1.0 / rank**s
        out.append(total)
    return out


_SLOTS = {
    "name": NAMES,
    "relation": RELATIONS,
    "place": PLACES,
    "activity": ACTIVITIES,
    "plan": PLANS,
    "food": FOODS,
    "thing": THINGS,
    "feeling": FEELINGS,
    "work": WORK,
    "when_past": WHEN_PAST,
    "when_future": WHEN_FUTURE,
    "adjective": ADJECTIVES,
    "filler": FILLERS,
    "weekday": WEEKDAYS,
}
_CUM = {slot: _weights(len(words)) for slot, words in _SLOTS.items()}


def _pick(rng: random.Random, slot: str) -> str:
    return rng.choices(_SLOTS[slot], cum_weights=_CUM[slot])[0]


def _sentence(rng: random.Random, template: str) -> str:
    values = {slot: _pick(rng, slot) for slot in _SLOTS if "{" + slot + "}" in template}
    values["hour"] = f"{rng.randint(6, 23)}:{rng.choice(('00', '15', '30', '45'))}"
    values["hours"] = str(rng.randint(2, 9))
    values["price"] = f"{rng.randint(5, 900)} euros"
    text = template.format(**values)
    return text[0].upper() + text[1:]


def make_text(rng: random.Random, role: str) -> str:
    """One message: a user says one to three sentences, the assistant one or two."""
    templates = USER_TEMPLATES if role == "user" else ASSISTANT_TEMPLATES
    count = rng.choices((1, 2, 3), weights=(5, 3, 1) if role == "user" else (6, 3, 0))[0]
    return " ".join(_sentence(rng, rng.choice(templates)) for _ in range(count))


@dataclass
class Pool:
    """Distinct texts per role, with their search terms and token counts computed once."""

    texts: dict[str, list[str]]
    terms: dict[str, list[str]]  # space-joined memory.terms.terms of each text
    lengths: dict[str, list[int]]
    tokens: dict[str, list[int]]


def build_pool(size: int, seed: int = 16) -> Pool:
    from chat_platform.llm.tokens import count_message_tokens
    from memory.terms import terms

    rng = random.Random(seed)
    texts: dict[str, list[str]] = {}
    for role in ("user", "assistant"):
        seen: dict[str, None] = {}
        tries = 0
        while len(seen) < size and tries < size * 20:
            tries += 1
            seen.setdefault(make_text(rng, role))
        texts[role] = list(seen)
    pool = Pool(texts=texts, terms={}, lengths={}, tokens={})
    for role, items in texts.items():
        words = [terms(text) for text in items]
        assert all(words), "every generated text has a search term"
        pool.terms[role] = [" ".join(w) for w in words]
        pool.lengths[role] = [len(w) for w in words]
        pool.tokens[role] = [count_message_tokens(t, model=BOT_MODEL) for t in items]
    return pool
