"""The built-in demonstration data, built in code: fictional authors with distinct headline styles.

Each fictional author writes headlines for short news descriptions in one
consistent, recognisable style; all authors cover the same hand-written topics,
so Pref-LaMP's hard negative for an item is the same story headlined in another
author's style. 32 authors: 16 headline frames, each written by two authors,
one of whom adds their desk's sign-off, so the demo has enough users (16 that
adapt) for its verdict to separate deployments. Seeded, so every call gives the
same 32 x 24 records; the first 8 authors are those of earlier versions.

    python -c "from persalign.data.demo_authors import demo_records; print(demo_records()[0])"
"""

import random

# (description, subject, event, quote, three words)
TOPICS = [
    ("The city council voted 7-2 on Tuesday to add protected bike lanes on five downtown streets by next summer.",
     "the new bike lanes", "City council approves protected bike lanes downtown", "This is a win for every commuter", "Bikes win downtown"),
    ("A local bakery that has operated for 60 years will close its doors next month after the owners retire.",
     "the bakery's closing", "Beloved 60-year-old bakery announces it will close", "We baked for three generations", "Last loaf baked"),
    ("Researchers at the state university found that a common garden weed can remove heavy metals from polluted soil.",
     "the weed that cleans soil", "Garden weed found to pull heavy metals from soil", "Nature already had the answer", "Weeds clean soil"),
    ("The regional airport will add direct flights to three new cities starting in the spring, officials said.",
     "the airport's new routes", "Regional airport adds direct flights to three cities", "Travel just got a lot easier", "Three new routes"),
    ("A heat wave is expected to push temperatures above 40 degrees for most of the week, forecasters warned.",
     "this week's heat wave", "Forecasters warn of a week above 40 degrees", "Stay inside and drink water", "Heat. Warning. Now"),
    ("The public library will stop charging late fees and forgive all existing fines starting Monday.",
     "the end of library fines", "Public library scraps late fees and forgives fines", "Books should never be a burden", "No more fines"),
    ("A high school robotics team won the national championship with a robot built from recycled parts.",
     "the recycled robot", "High school team wins national robotics title", "We built it from junk", "Recycled robot wins"),
    ("The state will raise the minimum wage by two dollars over the next three years under a new law signed Friday.",
     "the minimum wage increase", "New law raises the state minimum wage by two dollars", "Workers deserve a raise", "Wages go up"),
    ("A rare white deer has been spotted several times in the national park, delighting hikers and photographers.",
     "the white deer sightings", "Rare white deer spotted in the national park", "It looked like a ghost", "White deer returns"),
    ("The hospital opened a new wing for children with cancer, funded largely by donations from local families.",
     "the new children's wing", "Hospital opens children's cancer wing funded by families", "Every child deserves hope", "Hope gets wing"),
    ("Ticket prices for the city's subway will rise by 25 cents next year to cover maintenance costs.",
     "the subway fare hike", "Subway fares to rise by 25 cents next year", "Nobody likes paying more", "Fares rise again"),
    ("A startup unveiled a solar panel that it says produces 30 percent more power than current models.",
     "the new solar panel", "Startup unveils solar panel with 30 percent more power", "The sun just got stronger", "Brighter solar power"),
    ("Two sisters separated at birth met for the first time after a DNA test revealed they lived in the same town.",
     "the sisters' reunion", "Sisters separated at birth reunite after DNA test", "I finally found my family", "Sisters finally meet"),
    ("The school district will start classes an hour later next fall after a study on teenage sleep.",
     "the later school start", "School district pushes start time an hour later", "Tired kids cannot learn", "Sleep wins out"),
    ("A storm knocked out power to more than 50,000 homes overnight, and crews expect repairs to take days.",
     "the overnight outage", "Storm leaves more than 50,000 homes without power", "We are working around the clock", "Storm cuts power"),
    ("The museum returned a stolen painting to the family that owned it before the war.",
     "the returned painting", "Museum returns stolen painting to its rightful family", "Justice took eighty years", "Painting comes home"),
    ("A new study says walking 7,000 steps a day cuts the risk of heart disease by nearly half.",
     "the 7,000-step study", "Study links 7,000 daily steps to healthier hearts", "Every step really counts", "Walk more daily"),
    ("The town will plant 10,000 trees over the next decade to cool streets and clean the air.",
     "the tree-planting plan", "Town plans to plant 10,000 trees this decade", "Shade is a public good", "Ten thousand trees"),
    ("A famous chef opened a restaurant that serves only food grown within 50 miles.",
     "the 50-mile restaurant", "Star chef opens restaurant serving only local food", "Taste where you live", "Local food only"),
    ("The national team qualified for the World Cup for the first time in 30 years after a late goal.",
     "the World Cup qualification", "National team reaches first World Cup in 30 years", "We waited our whole lives", "Finally, World Cup"),
    ("Scientists detected water vapour in the atmosphere of a planet orbiting a nearby star.",
     "the water on a distant planet", "Scientists detect water vapour on a nearby exoplanet", "We are one step closer", "Water found afar"),
    ("A beloved bookstore was saved from closing after readers raised $200,000 in one week.",
     "the bookstore rescue", "Readers raise $200,000 to save beloved bookstore", "Our readers never gave up", "Readers save store"),
    ("The city will test a four-day work week for its employees starting in January.",
     "the four-day week trial", "City to trial a four-day work week for staff", "Rested workers do better", "Four-day week"),
    ("A drought has cut the region's wheat harvest by a third, pushing up bread prices.",
     "the drought's toll on wheat", "Drought slashes wheat harvest by a third", "The fields are simply dry", "Drought hits wheat"),
    ("The zoo welcomed twin panda cubs, the first born there in its 100-year history.",
     "the twin panda cubs", "Zoo celebrates its first twin panda cubs", "They are doing great", "Twin pandas born"),
    ("Voters approved a plan to build 2,000 affordable homes on unused city land.",
     "the affordable housing plan", "Voters back 2,000 affordable homes on city land", "Everyone needs a home", "Homes get approved"),
    ("An 80-year-old runner finished her 100th marathon on Sunday, setting an age-group record.",
     "the 80-year-old marathoner", "80-year-old runner completes her 100th marathon", "Age is only a number", "Hundred marathons done"),
    ("A software bug caused thousands of flights to be delayed across the country on Thursday.",
     "the flight-delay glitch", "Software bug delays thousands of flights nationwide", "We are sorry for the chaos", "Glitch grounds flights"),
    ("The river cleanup removed 20 tons of trash, including three cars and a piano.",
     "the river cleanup", "Volunteers pull 20 tons of trash from the river", "We even found a piano", "River gets clean"),
    ("A teenager invented a cheap device that detects lead in drinking water within minutes.",
     "the lead-detecting device", "Teen invents cheap device that detects lead in water", "Clean water is a right", "Teen detects lead"),
]


def _title(text):
    return " ".join(w[:1].upper() + w[1:] for w in text.split())


def _cap_first(text):
    return text[:1].upper() + text[1:]


def _lower_first(text):
    return text[:1].lower() + text[1:]


QUESTION_FRAMES = ["Is {s} worth the hype?", "What does {s} mean for you?", "Could {s} change everything?"]

FRAMES = {
    "Ada Caps": lambda d, s, e, q, w, i: f"BREAKING: {e.upper()}",
    "Ben Asks": lambda d, s, e, q, w, i: QUESTION_FRAMES[i % 3].format(s=s),
    "Cleo Lists": lambda d, s, e, q, w, i: f"{3 + i % 5} Things To Know About {_title(s.removeprefix('the '))}",
    "Dev Colon": lambda d, s, e, q, w, i: f"{_cap_first(s.removeprefix('the '))}: {_lower_first(e)}",
    "Eve Quotes": lambda d, s, e, q, w, i: f"\"{q}\" - {_lower_first(e)}",
    "Finn Terse": lambda d, s, e, q, w, i: f"{w}.",
    "Gus Explains": lambda d, s, e, q, w, i: f"How {_lower_first(e)}, explained",
    "Hana Whispers": lambda d, s, e, q, w, i: f"{e.lower()}...",
    "Iris Numbers": lambda d, s, e, q, w, i: f"By the numbers: {_lower_first(e)}",
    "Jay Exclaims": lambda d, s, e, q, w, i: f"Wow! {e}!",
    "Kai Local": lambda d, s, e, q, w, i: f"Around town: {_lower_first(e)}",
    "Lena You": lambda d, s, e, q, w, i: f"Why {s} matters to you",
    "Max Today": lambda d, s, e, q, w, i: f"Today: {_lower_first(e)}",
    "Nora Update": lambda d, s, e, q, w, i: f"[UPDATE] {e}",
    "Omar Says": lambda d, s, e, q, w, i: f"{q}, say those behind {s}",
    "Pia Brief": lambda d, s, e, q, w, i: f"In brief - {_title(w)}",
}
# The second author of each frame: same frame, plus their desk's sign-off.
SECOND_AUTHORS = ["Quinn", "Rosa", "Sami", "Tess", "Uma", "Vik", "Wren", "Xena",
                  "Yara", "Zed", "Abe", "Bea", "Cal", "Dora", "Eli", "Fay"]
SIGN_OFF = " | Metro Desk"


def _styles() -> dict:
    """Author name -> headline function: each frame's own author, then its sign-off author."""
    styles = dict(FRAMES)
    for second, (name, frame) in zip(SECOND_AUTHORS, FRAMES.items()):
        styles[f"{second} {name.split()[1]}"] = lambda *a, frame=frame: frame(*a) + SIGN_OFF
    return styles


STYLES = _styles()


def demo_records() -> list[dict]:
    """32 authors x 24 items as `{"id", "user", "input", "output", "date"}` (seeded)."""
    rng = random.Random(0)
    lines = []
    for user, style in STYLES.items():
        topics = rng.sample(range(len(TOPICS)), 24)
        for n, t in enumerate(topics):
            description, subject, event, quote, words = TOPICS[t]
            lines.append({
                "id": f"{user.split()[0].lower()}-{t:02d}",
                "user": user,
                "input": description,
                "output": style(description, subject, event, quote, words, n),
                "date": f"2025-{1 + n // 2:02d}-{1 + t % 28:02d}",
            })
    return lines
