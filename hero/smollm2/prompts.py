"""Chat prompts written by the project for the SmolLM2 bed: training prompts and held-out evaluation prompts.

Training prompts are instruction templates crossed with topic lists, plus requests about
passages of the training plays; the evaluation prompts use other templates and other
topics, so the held-out chat the agreement task scores shares no prompt with training.
Neither asks the common-knowledge questions of ``hero.smollm2.knowledge``.
"""

from __future__ import annotations

import random

TRAIN_TEMPLATES = (
    "Explain {} to a ten-year-old.",
    "Write a short poem about {}.",
    "Give me three tips about {}.",
    "Write a short story that involves {}.",
    "What are the benefits and drawbacks of {}?",
    "Describe {} in a few sentences.",
    "Why do people care about {}?",
    "Write a friendly email to a colleague about {}.",
)
TRAIN_TOPICS = (
    "gardening",
    "learning to cook",
    "riding a bicycle",
    "saving money",
    "writing a diary",
    "rainy days",
    "public libraries",
    "team sports",
    "learning a new language",
    "recycling",
    "morning routines",
    "board games",
    "train journeys",
    "keeping bees",
    "baking bread",
    "camping in the woods",
    "painting",
    "playing the piano",
    "moving to a new city",
    "volunteering",
    "drinking enough water",
    "walking in the park",
    "birthday parties",
    "taking notes in class",
    "fixing a leaking tap",
    "planting trees",
    "a lost umbrella",
    "sleeping well",
    "visiting a museum",
    "a friendly robot",
    "a rainy market",
    "a village festival",
    "fishing at a lake",
    "building a snowman",
    "writing letters by hand",
    "a bakery at dawn",
    "a lighthouse keeper",
    "a curious cat",
    "running a marathon",
    "cleaning the kitchen",
)
PASSAGE_TEMPLATES = (
    "Here is a passage from a play:\n\n{}\n\nExplain what is happening in simple words.",
    "Rewrite this passage in modern English:\n\n{}",
)
EVAL_TEMPLATES = (
    "How would you plan {}?",
    "List a few common mistakes people make with {}.",
    "Summarise the main ideas behind {} in one paragraph.",
    "Write a limerick about {}.",
)
EVAL_TOPICS = (
    "a weekend trip",
    "a science fair project",
    "home composting",
    "a job interview",
    "a picnic",
    "a school play",
    "a small vegetable garden",
    "a long flight",
    "a family reunion",
    "a first aid kit",
    "a budget for groceries",
    "a neighbourhood clean-up",
    "a chess club",
    "a dog's first walk",
    "a tea party",
    "a road trip",
)


def _passages(text: str, n: int, rng: random.Random, lines: int = 6) -> list[str]:
    """``n`` passages of ``lines`` consecutive non-empty lines from ``text`` (seeded)."""
    rows = [line.strip() for line in text.splitlines() if len(line.strip()) > 20]
    starts = rng.sample(range(len(rows) - lines), n)
    return ["\n".join(rows[s : s + lines]) for s in starts]


def train_prompts(plays: dict[str, str], n_passages: int, seed: int) -> list[str]:
    """Template × topic prompts, then ``n_passages`` passage requests spread over the training ``plays``."""
    rng = random.Random(seed)
    prompts = [t.format(topic) for t in TRAIN_TEMPLATES for topic in TRAIN_TOPICS]
    names = sorted(plays)
    per_play = -(-n_passages // len(names))
    passages = [p for name in names for p in _passages(plays[name], per_play, rng)][:n_passages]
    prompts += [rng.choice(PASSAGE_TEMPLATES).format(p) for p in passages]
    rng.shuffle(prompts)
    return prompts


def eval_prompts() -> list[str]:
    """The held-out chat prompts (other templates, other topics)."""
    return [t.format(topic) for t in EVAL_TEMPLATES for topic in EVAL_TOPICS]
