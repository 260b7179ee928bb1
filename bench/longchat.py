"""A long user conversation in the manner of LongMemEval and LoCoMo, laid out from a seed.

The user's turns mix personal facts with chit-chat and questions; the assistant's replies are
3-6 times longer than the user's and never repeat the facts; some facts are updated later (the
newest value is the right one). The history ends with a question about one fact, and the
probe is that fact's newest value: the evidence the answer needs.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

SYSTEM = "You are a friendly assistant. The user chats with you about their life over months."


@dataclass(frozen=True)
class Fact:
    first: str  # how it is first said, {v} its value
    update: str | None  # how a later change is said, or None: it never changes
    question: str
    values: Callable[[random.Random], str]


def _pick(*options: str) -> Callable[[random.Random], str]:
    return lambda r: r.choice(options)


FACTS = [
    Fact("I just moved to {v} last month, so everything is still in boxes.",
         "Oh, small update: we ended up moving again, we live in {v} now.",
         "Which city do I live in now?",
         _pick("Denver", "Tucson", "Raleigh", "Spokane", "Madison", "Boise", "Savannah")),
    Fact("Our new puppy is called {v}, and he chews absolutely everything.",
         "We renamed the puppy {v} in the end, the first name never stuck.",
         "What is my puppy's name?",
         _pick("Biscuit", "Pepper", "Waffles", "Juniper", "Mochi", "Rocket", "Tofu")),
    Fact("My commute is about {v} each way these days.",
         "Good news, with the new bus line my commute is down to {v}.",
         "How long is my commute?",
         lambda r: f"{r.randrange(20, 80, 5)} minutes"),
    Fact("The total for the new headphones was around, oh, let's say ${v}.", None,
         "How much did I pay for the headphones?",
         lambda r: f"{r.randint(40, 320)}.{r.choice(['49', '95', '99'])}"),
    Fact("I put the old couch up for sale and the ad was posted {v} ago.", None,
         "When was the couch ad posted?",
         _pick("three days", "two weeks", "five days", "ten days")),
    Fact("I've been going to the gym on {v} mornings, before work.",
         "I moved my gym sessions to {v} mornings, it fits the new shifts better.",
         "Which mornings do I go to the gym?",
         _pick("Monday and Wednesday", "Tuesday and Thursday", "Friday and Sunday",
               "Wednesday and Saturday")),
    Fact("My sister's wedding is on {v} and I'm the maid of honour.",
         "The venue fell through, so my sister's wedding is now on {v}.",
         "When is my sister's wedding?",
         lambda r: f"{r.choice(['June', 'July', 'August', 'September'])} {r.randint(2, 28)}"),
    Fact("I'm halfway through {v} for my book club.", None,
         "Which book am I reading for the book club?",
         _pick("'The Overstory'", "'Piranesi'", "'Circe'", "'Klara and the Sun'",
               "'The Dutch House'")),
    Fact("We set a budget of ${v} for the second-hand car.",
         "We talked it over and raised the car budget to ${v}.",
         "What is our budget for the car?",
         lambda r: f"{r.randint(6, 30)},{r.choice(['000', '500'])}"),
    Fact("I have {v}, and all of them are under ten.", None,
         "How many kids do I have?",
         _pick("two kids", "three kids", "four kids")),
    Fact("I started as a {v} at the clinic a while ago.",
         "Big news: I got promoted to {v} last week!",
         "What is my job at the clinic?",
         _pick("receptionist", "lab technician", "billing clerk", "practice manager",
               "nurse coordinator")),
    Fact("My usual coffee order is a {v}, nothing fancy.", None,
         "What is my usual coffee order?",
         _pick("flat white", "cortado", "oat latte", "double espresso", "cold brew")),
]  # fmt: skip
CHAT = [
    "Ugh, what a week.",
    "Haha, okay, fair enough.",
    "Thanks, that was really helpful last time!",
    "I've been so busy lately, honestly.",
    "The weather here has been all over the place.",
    "Sorry, I keep jumping between topics.",
    "Anyway, enough about me.",
    "You always give such thoughtful answers.",
    "I was up way too late again last night.",
    "My neighbour's kid has been practising the drums all weekend.",
]
ASKS = [
    "Can you suggest a quick dinner I can make on a weeknight?",
    "Any tips for sleeping better when I'm stressed?",
    "What's a good way to start running again after a long break?",
    "How do I keep houseplants alive in a dark flat?",
    "Could you recommend a podcast for long drives?",
    "What should I pack for a rainy weekend away?",
    "How do people actually stick to a budget?",
    "Is it worth learning to cook with a pressure cooker?",
    "What are some fun things to do on a rainy Saturday?",
    "How can I be more patient with my kids in the morning?",
]
REPLY = [
    "That's a great question, and there are a few angles worth considering here.",
    "Many people find that small, consistent changes work better than big resolutions.",
    "It helps to start with what you already enjoy and build gradually from there.",
    "If you can, set aside a little time each week to plan ahead; it pays off.",
    "Keep it simple at first, and adjust once you see what actually works for you.",
    "A short checklist can take a lot of the decision fatigue out of busy days.",
    "Don't be too hard on yourself if it takes a few tries to find a rhythm.",
    "Friends and family can be a great source of ideas and encouragement too.",
    "Try one option for a couple of weeks before deciding whether it suits you.",
    "It's also worth noticing what drains your energy, and trimming that first.",
    "Online communities often share practical tips from people in the same situation.",
    "Whatever you choose, writing down how it goes makes the next decision easier.",
]


def long_chat(seed: int, turns: int = 200) -> tuple[list[dict], list[str], str]:
    """`turns` user turns, each with a reply 3-6 times its length; every fact said once, some
    changed later; then a question about one fact. Returns the messages, the probe (the
    newest value of the fact asked about) and the question."""
    rng = random.Random(seed)
    first, newest, plan = _plan(rng, turns)
    msgs: list[dict] = [{"role": "system", "content": SYSTEM}]
    for turn in range(turns):
        parts = rng.sample(CHAT, rng.randint(0, 3))
        if turn in plan:
            k, template = plan[turn]
            value = newest[k] if template is FACTS[k].update else first[k]
            parts.insert(rng.randint(0, len(parts)), template.format(v=value))
        if not parts or rng.random() < 0.7:
            parts.append(rng.choice(ASKS))
        said = " ".join(parts)
        msgs.append({"role": "user", "content": said})
        msgs.append({"role": "assistant", "content": _reply(rng, len(said))})
    asked = rng.randrange(len(FACTS))
    ask = FACTS[asked].question
    question = f"Quick one before I forget: {ask[0].lower()}{ask[1:]}"
    msgs.append({"role": "user", "content": question})
    return msgs, [newest[asked]], question


def _plan(
    rng: random.Random, turns: int
) -> tuple[list[str], list[str], dict[int, tuple[int, str]]]:
    """Each fact's first and newest value, and the turn each statement of it is made in."""
    first = [f.values(rng) for f in FACTS]
    newest = list(first)
    spots = rng.sample(range(1, turns - 1), 2 * len(FACTS))
    plan: dict[int, tuple[int, str]] = {}
    for k, fact in enumerate(FACTS):
        a, b = sorted(spots[2 * k : 2 * k + 2])
        plan[a] = (k, fact.first)
        if fact.update is not None:
            while newest[k] == first[k] or first[k] in newest[k] or newest[k] in first[k]:
                newest[k] = fact.values(rng)
            plan[b] = (k, fact.update)
    return first, newest, plan


def _reply(rng: random.Random, said: int) -> str:
    """Advice prose 3-6 times as long as what the user said (in characters)."""
    want = said * rng.randint(3, 6)
    out: list[str] = []
    while sum(len(s) + 1 for s in out) < want:
        out.append(rng.choice(REPLY))
    return " ".join(out)
