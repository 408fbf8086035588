"""More training prompts for the SmolLM2 bed's ten-times recipe (``model.recipe=x10``).

The base recipe's prompts (``hero.smollm2.prompts``) give 722 training conversations; a
second pass over them memorises the samples. This module adds the prompts of a bed with
ten times as many: more instruction templates crossed with more topics, passage
requests over more of the training-side plays, and continuation requests (write what the
characters say next) from those plays. The evaluation prompts, the held-out plays and the
knowledge questions stay out, as in the base recipe (``tests/test_smollm2.py`` checks it).
"""

from __future__ import annotations

import random

from hero.smollm2 import prompts

TEMPLATES = (
    "Write a haiku about {}.",
    "What would a beginner need to know about {}?",
    "Write a short dialogue between two friends about {}.",
    "Describe a typical day that involves {}.",
    "Write a diary entry about {}.",
    "What questions might a child ask about {}?",
    "Write a product description for something related to {}.",
    "Compare {} with something similar.",
    "Write an encouraging message to someone who is struggling with {}.",
    "Write the opening paragraph of a novel about {}.",
    "Tell me how {} has changed over the years.",
    "Give a short speech about {}.",
)
TOPICS = (
    "knitting a scarf",
    "flying a kite",
    "a broken bicycle chain",
    "learning to swim",
    "a cup of hot chocolate",
    "repairing an old chair",
    "a thunderstorm at night",
    "feeding the birds in winter",
    "a quiet bookshop",
    "sorting the laundry",
    "a pet goldfish",
    "making pancakes",
    "a first day at school",
    "a noisy neighbour",
    "growing tomatoes on a balcony",
    "a power cut",
    "a sunrise over the sea",
    "a lost key",
    "an old photograph album",
    "a street musician",
    "a snowy morning",
    "the smell of fresh coffee",
    "a busy train station",
    "learning to juggle",
    "a kind stranger",
    "a message in a bottle",
    "painting a fence",
    "a crowded bus",
    "a school library",
    "a chess tournament",
    "a hot air balloon",
    "a sandcastle",
    "a rainy afternoon indoors",
    "a mountain hut",
    "a village bakery",
    "an autumn forest",
    "a broken umbrella",
    "a shy puppy",
    "sharing a meal with friends",
    "a clock that stopped",
    "learning to draw",
    "making a paper plane",
    "a lemonade stand",
    "a windy beach",
    "a treehouse",
    "a school choir",
    "looking at the stars",
    "a city park in spring",
    "a bus driver",
    "a night shift nurse",
    "a town square",
    "a family recipe",
    "a pair of old boots",
    "a bicycle repair shop",
    "a quiet harbour",
    "writing a song",
    "a friendly postman",
    "a lighthouse in a storm",
    "a garden pond",
    "a jigsaw puzzle",
    "keeping a plant alive",
    "a talking parrot",
    "a missed train",
    "an apple orchard",
    "a snow day",
    "a music lesson",
    "a handmade gift",
    "a paper lantern",
    "a farmers' market",
    "an old wooden boat",
    "a spelling contest",
    "the first snow of the year",
    "a long walk home",
    "a rooftop garden",
    "a homemade soup",
    "a sleepy village",
    "a night at the theatre",
    "a river crossing",
    "learning to skate",
    "a forgotten letter",
    "a street market at night",
    "a desert journey",
    "a summer fair",
    "a small island",
    "a mountain lake",
    "a broken phone screen",
    "a wise old owl",
    "fixing a flat tyre",
    "a busy kitchen",
    "a newspaper round",
    "a cosy blanket",
    "a robot that learns to paint",
    "an empty playground",
    "a bridge in the fog",
    "a carpenter's workshop",
    "a library card",
    "a rescued kitten",
    "a football match in the rain",
    "a marching band",
    "a kitchen garden",
    "a garden shed",
    "the last day of summer",
    "a waiting room",
    "a clockmaker",
    "a children's drawing",
    "a ferry ride",
    "a tired runner",
    "a new pair of glasses",
    "a balloon that floated away",
    "a shoe shop",
)
CONTINUATION_TEMPLATES = (
    "Continue this scene from a play for a few more lines:\n\n{}",
    "Here are some lines from a play:\n\n{}\n\nWrite what the characters might say next.",
)


def train_prompts(plays: dict[str, str], n_passages: int, n_continuations: int, seed: int) -> list[str]:
    """The base recipe's prompts, every template × topic pair of both modules, and continuation requests.

    ``plays`` are the training-side plays; ``n_passages`` passage requests (the base
    recipe's templates) and ``n_continuations`` continuation requests are spread over
    them. Distinct prompts only, shuffled (seeded).
    """
    rng = random.Random(seed + 1)
    chat = prompts.train_prompts(plays, n_passages, seed)
    chat += [t.format(x) for t in prompts.TRAIN_TEMPLATES + TEMPLATES for x in prompts.TRAIN_TOPICS + TOPICS]
    names = sorted(plays)
    per_play = -(-n_continuations // len(names))
    passages = [p for name in names for p in prompts._passages(plays[name], per_play, rng, lines=4)]
    chat += [rng.choice(CONTINUATION_TEMPLATES).format(p) for p in passages[:n_continuations]]
    chat = list(dict.fromkeys(chat))
    rng.shuffle(chat)
    return chat
