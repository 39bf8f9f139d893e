"""English stop words and chat filler, for anything that picks content words out of text.

A plain module (no Django, no apps, no built-in model): memory's snapshot descriptions use it.
``ENGLISH`` is a general English function-word list (articles, pronouns, auxiliaries, prepositions,
conjunctions, common adverbs and quantifiers, contractions); ``CHAT_FILLER`` is what chat turns
say without saying anything (greetings, acknowledgements, politeness, talk about the talk).
``STOPWORDS`` is both. ``QUERY_STOPWORDS`` is the shorter list a question's search words are
picked with (the built-in models and memory's record search): it keeps words such as "answer" or
"back" that can be what a question is about. Entries are lower case; apostrophes are ASCII.
``WORD`` is what a word is for all of them (the built-in models' terms, memory's search terms and
excerpts).
"""

import re

# A word: letters and digits, no underscore (so snapshot_1_40 -> snapshot, 1, 40), with inner
# apostrophes ("don't", "Ravi's"); "1,150" is two words.
WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")

ENGLISH = frozenset(
    """
    a about above across after afterwards again against ago all almost alone along already also
    although always am among amongst an and another any anybody anyhow anyone anything anyway
    anywhere are aren't around as at back be became because become becomes becoming been before
    beforehand behind being below beside besides between beyond both but by can can't cannot could
    couldn't did didn't do does doesn't doing don't done down during each either else elsewhere
    enough etc even ever every everybody everyone everything everywhere except few for former
    formerly from further furthermore had hadn't has hasn't have haven't having he he'd he'll he's
    hence her here here's hereafter hereby herein hers herself him himself his how how's however i
    i'd i'll i'm i've ie if in indeed instead into is isn't it it'd it'll it's its itself just
    last latter least less let let's lot lots made make makes many may maybe me meanwhile might
    mine more moreover most mostly much must mustn't my myself namely neither never nevertheless
    next no nobody none noone nor not nothing now nowhere of off often on once one ones only onto
    or other others otherwise ought our ours ourselves out over own per perhaps quite rather
    really same several shall shan't she she'd she'll she's should shouldn't since so some somebody
    somehow someone something sometime sometimes somewhat somewhere still such than that that'll
    that's the their theirs them themselves then thence there there's thereafter thereby therefore
    therein these they they'd they'll they're they've thing things this those though through
    throughout thru thus to together too toward towards under unless until up upon us used using
    very via was wasn't way we we'd we'll we're we've well were weren't what what's whatever when
    when's whence whenever where where's whereas whereby wherever whether which while whither who
    who's whoever whole whom whose why why's will with within without won't would wouldn't yet you
    you'd you'll you're you've your yours yourself yourselves
    """.split()  # noqa: SIM905 - a word list reads better as prose
)

CHAT_FILLER = frozenset(
    """
    ack acknowledged alright answer answered answers ask asked asking awesome bye cheers chat
    chatting conversation cool course definitely earlier fine get gets getting go going good got
    great hello hey hi hmm understand understood indeed kind know let like likes look looks mean
    mention mentioned message messages need needs nice noted ok okay oh please pretty reply replied
    received recall remember right said say says see sorry sounds sure talk talked talking tell
    telling thank thanks think thought told true want wanted wants yeah yep yes
    """.split()  # noqa: SIM905 - a word list reads better as prose
)

STOPWORDS = ENGLISH | CHAT_FILLER

QUERY_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't
    doing don't down during each few for from further had hadn't has hasn't have haven't having
    he he'd he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've
    if in into is isn't it it's its itself let's me more most mustn't my myself no nor not of off
    on once only or other ought our ours ourselves out over own same shan't she she'd she'll
    she's should shouldn't so some such than that that's the their theirs them themselves then
    there there's these they they'd they'll they're they've this those through to too under until
    up very was wasn't we we'd we'll we're we've were weren't what what's when when's where
    where's which while who who's whom why why's with won't would wouldn't you you'd you'll you're
    you've your yours yourself yourselves
    also just tell told say said says know remember recall please thanks thank hi hello hey ok okay
    yes yeah sure again earlier before mentioned mention talk talked conversation chat us anything
    something thing things get got like want wanted one much many
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
