"""Common-knowledge questions written by the project: the items of the ``knowledge`` and ``answer`` tasks.

Each category is a table of (question, answer) pairs in one question frame; a
multiple-choice item offers the answer and three other answers of the same category
(seeded), so every choice is a plausible type of answer and chance is 1/4. The
generation task asks the same questions in a chat turn and counts an answer correct when
it contains the gold answer (or one of its listed aliases) as a whole word.

None of these questions or answers is in the training prompts (``hero.smollm2.prompts``
asks for explanations, stories and advice on other topics; ``test_smollm2_data`` checks
that no answer-bearing question text appears there).
"""

from __future__ import annotations

import random
import re

CAPITALS = {
    "France": "Paris",
    "Germany": "Berlin",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Portugal": "Lisbon",
    "Japan": "Tokyo",
    "China": "Beijing",
    "Russia": "Moscow",
    "Egypt": "Cairo",
    "Greece": "Athens",
    "Ireland": "Dublin",
    "Norway": "Oslo",
    "Sweden": "Stockholm",
    "Finland": "Helsinki",
    "Denmark": "Copenhagen",
    "Poland": "Warsaw",
    "Austria": "Vienna",
    "Hungary": "Budapest",
    "Belgium": "Brussels",
    "the Netherlands": "Amsterdam",
    "the United Kingdom": "London",
    "the United States": "Washington",
    "Canada": "Ottawa",
    "Mexico": "Mexico City",
    "Argentina": "Buenos Aires",
    "Peru": "Lima",
    "Chile": "Santiago",
    "Colombia": "Bogotá",
    "Cuba": "Havana",
    "India": "New Delhi",
    "Pakistan": "Islamabad",
    "Thailand": "Bangkok",
    "Vietnam": "Hanoi",
    "South Korea": "Seoul",
    "Indonesia": "Jakarta",
    "the Philippines": "Manila",
    "Kenya": "Nairobi",
    "Nigeria": "Abuja",
    "Ethiopia": "Addis Ababa",
    "Morocco": "Rabat",
    "Turkey": "Ankara",
    "Iran": "Tehran",
    "Iraq": "Baghdad",
    "Saudi Arabia": "Riyadh",
    "Israel": "Jerusalem",
    "Ukraine": "Kyiv",
    "Czechia": "Prague",
    "Romania": "Bucharest",
    "Australia": "Canberra",
    "New Zealand": "Wellington",
}
SYMBOLS = {
    "hydrogen": "H",
    "helium": "He",
    "carbon": "C",
    "nitrogen": "N",
    "oxygen": "O",
    "sodium": "Na",
    "magnesium": "Mg",
    "aluminium": "Al",
    "silicon": "Si",
    "phosphorus": "P",
    "sulfur": "S",
    "chlorine": "Cl",
    "potassium": "K",
    "calcium": "Ca",
    "iron": "Fe",
    "copper": "Cu",
    "zinc": "Zn",
    "silver": "Ag",
    "tin": "Sn",
    "gold": "Au",
    "mercury": "Hg",
    "lead": "Pb",
    "uranium": "U",
    "neon": "Ne",
    "argon": "Ar",
    "nickel": "Ni",
    "iodine": "I",
    "fluorine": "F",
    "lithium": "Li",
    "platinum": "Pt",
}
AUTHORS = {
    "Pride and Prejudice": "Jane Austen",
    "Nineteen Eighty-Four": "George Orwell",
    "Animal Farm": "George Orwell",
    "Moby-Dick": "Herman Melville",
    "War and Peace": "Leo Tolstoy",
    "Anna Karenina": "Leo Tolstoy",
    "Crime and Punishment": "Fyodor Dostoevsky",
    "Don Quixote": "Miguel de Cervantes",
    "The Adventures of Tom Sawyer": "Mark Twain",
    "Oliver Twist": "Charles Dickens",
    "A Christmas Carol": "Charles Dickens",
    "Great Expectations": "Charles Dickens",
    "The Old Man and the Sea": "Ernest Hemingway",
    "The Great Gatsby": "F. Scott Fitzgerald",
    "Frankenstein": "Mary Shelley",
    "Dracula": "Bram Stoker",
    "Jane Eyre": "Charlotte Brontë",
    "Wuthering Heights": "Emily Brontë",
    "The Hobbit": "J. R. R. Tolkien",
    "The Lord of the Rings": "J. R. R. Tolkien",
    "Harry Potter and the Philosopher's Stone": "J. K. Rowling",
    "Les Misérables": "Victor Hugo",
    "The Odyssey": "Homer",
    "The Divine Comedy": "Dante Alighieri",
    "Romeo and Juliet": "William Shakespeare",
    "Hamlet": "William Shakespeare",
    "The Raven": "Edgar Allan Poe",
    "Alice's Adventures in Wonderland": "Lewis Carroll",
    "The Time Machine": "H. G. Wells",
    "Treasure Island": "Robert Louis Stevenson",
}
PLANETS = {
    "Which planet is known as the Red Planet?": "Mars",
    "Which planet is the largest in our solar system?": "Jupiter",
    "Which planet is closest to the Sun?": "Mercury",
    "Which planet is famous for its bright rings?": "Saturn",
    "Which planet do we live on?": "Earth",
    "Which planet is the hottest in our solar system?": "Venus",
    "Which planet is farthest from the Sun?": "Neptune",
    "Which planet rotates on its side?": "Uranus",
    "Which planet has a moon called Titan?": "Saturn",
    "Which planet has the Great Red Spot?": "Jupiter",
    "Which planet is third from the Sun?": "Earth",
    "Which planet is often called Earth's twin?": "Venus",
}
UNITS = {
    "length": "metre",
    "mass": "kilogram",
    "time": "second",
    "electric current": "ampere",
    "temperature": "kelvin",
    "force": "newton",
    "energy": "joule",
    "power": "watt",
    "pressure": "pascal",
    "electric charge": "coulomb",
    "voltage": "volt",
    "electrical resistance": "ohm",
    "frequency": "hertz",
    "amount of substance": "mole",
    "luminous intensity": "candela",
}
NUMBERS = {
    "How many days are in a week?": "7",
    "How many months are in a year?": "12",
    "How many legs does a spider have?": "8",
    "How many legs does an insect have?": "6",
    "How many minutes are in an hour?": "60",
    "How many hours are in a day?": "24",
    "How many sides does a triangle have?": "3",
    "How many sides does a hexagon have?": "6",
    "How many continents are there?": "7",
    "How many centimetres are in a metre?": "100",
    "How many seconds are in a minute?": "60",
    "How many players are on a soccer team on the field?": "11",
    "How many days are in a leap year?": "366",
    "How many planets are in our solar system?": "8",
    "How many strings does a standard guitar have?": "6",
}
CONTINENTS = {
    "France": "Europe",
    "Brazil": "South America",
    "Kenya": "Africa",
    "Japan": "Asia",
    "Canada": "North America",
    "Australia": "Oceania",
    "Egypt": "Africa",
    "India": "Asia",
    "Argentina": "South America",
    "Germany": "Europe",
    "Mexico": "North America",
    "China": "Asia",
    "Nigeria": "Africa",
    "Peru": "South America",
    "Italy": "Europe",
    "Thailand": "Asia",
    "Morocco": "Africa",
    "Chile": "South America",
    "Norway": "Europe",
    "Vietnam": "Asia",
    "Ghana": "Africa",
    "Colombia": "South America",
    "Poland": "Europe",
    "Cuba": "North America",
}
LANGUAGES = {
    "France": "French",
    "Germany": "German",
    "Spain": "Spanish",
    "Italy": "Italian",
    "Portugal": "Portuguese",
    "Brazil": "Portuguese",
    "Japan": "Japanese",
    "China": "Chinese",
    "Russia": "Russian",
    "Greece": "Greek",
    "Turkey": "Turkish",
    "Poland": "Polish",
    "the Netherlands": "Dutch",
    "Sweden": "Swedish",
    "Mexico": "Spanish",
    "Egypt": "Arabic",
    "South Korea": "Korean",
    "Thailand": "Thai",
    "Finland": "Finnish",
    "Hungary": "Hungarian",
}
CURRENCIES = {
    "Japan": "yen",
    "the United Kingdom": "pound",
    "the United States": "dollar",
    "India": "rupee",
    "Russia": "ruble",
    "China": "yuan",
    "Mexico": "peso",
    "Switzerland": "franc",
    "South Korea": "won",
    "Germany": "euro",
    "Thailand": "baht",
    "Poland": "zloty",
}
SCIENTISTS = {
    "Who developed the theory of relativity?": "Albert Einstein",
    "Who formulated the laws of motion and universal gravitation?": "Isaac Newton",
    "Who proposed the theory of evolution by natural selection?": "Charles Darwin",
    "Who discovered penicillin?": "Alexander Fleming",
    "Who invented the telephone?": "Alexander Graham Bell",
    "Who discovered radium and polonium?": "Marie Curie",
    "Who created the periodic table of the elements?": "Dmitri Mendeleev",
    "Who painted the Mona Lisa?": "Leonardo da Vinci",
    "Who painted The Starry Night?": "Vincent van Gogh",
    "Who composed the Fifth Symphony that begins with four famous notes?": "Ludwig van Beethoven",
    "Who was the first person to walk on the Moon?": "Neil Armstrong",
    "Who wrote the theory of heliocentrism that put the Sun at the centre?": "Nicolaus Copernicus",
}
OPPOSITES = {
    "hot": "cold",
    "up": "down",
    "big": "small",
    "fast": "slow",
    "happy": "sad",
    "light": "dark",
    "open": "closed",
    "early": "late",
    "full": "empty",
    "strong": "weak",
    "rich": "poor",
    "young": "old",
    "wet": "dry",
    "loud": "quiet",
    "hard": "soft",
}
COLOURS = {
    "What colour is a ripe banana?": "yellow",
    "What colour is grass?": "green",
    "What colour is snow?": "white",
    "What colour is the sky on a clear day?": "blue",
    "What colour is coal?": "black",
    "What colour is a ripe tomato?": "red",
    "What colour do you get by mixing blue and yellow?": "green",
    "What colour do you get by mixing red and white?": "pink",
    "What colour is an orange?": "orange",
    "What colour are most clouds?": "white",
}
ALIASES = {
    "Washington": ("Washington",),
    "metre": ("metre", "meter"),
    "7": ("7", "seven"),
    "12": ("12", "twelve"),
    "8": ("8", "eight"),
    "6": ("6", "six"),
    "60": ("60", "sixty"),
    "24": ("24", "twenty-four"),
    "3": ("3", "three"),
    "100": ("100", "hundred"),
    "11": ("11", "eleven"),
    "Bogotá": ("Bogotá", "Bogota"),
    "Kyiv": ("Kyiv", "Kiev"),
    "aluminium": ("aluminium", "aluminum"),
    "Czechia": ("Czechia",),
    "ruble": ("ruble", "rouble"),
    "Oceania": ("Oceania", "Australia"),
}


def _table(category: str, table: dict, frame: str | None = None) -> list[dict]:
    return [{"category": category, "question": frame.format(k) if frame else k, "answer": v} for k, v in table.items()]


def questions() -> list[dict]:
    """Every question as {category, question, answer}, in a fixed order."""
    return (
        _table("capital", CAPITALS, "What is the capital of {}?")
        + _table("symbol", SYMBOLS, "What is the chemical symbol for {}?")
        + _table("author", AUTHORS, "Who wrote {}?")
        + _table("planet", PLANETS)
        + _table("unit", UNITS, "What is the SI unit of {}?")
        + _table("number", NUMBERS)
        + _table("continent", CONTINENTS, "On which continent is {}?")
        + _table("language", LANGUAGES, "What is the main language spoken in {}?")
        + _table("currency", CURRENCIES, "What is the currency of {}?")
        + _table("person", SCIENTISTS)
        + _table("opposite", OPPOSITES, "What is the opposite of {}?")
        + _table("colour", COLOURS)
    )


def multiple_choice(seed: int = 0) -> list[dict]:
    """Each question with four answers of its category (gold at a seeded position): {query, choices, gold, category}."""
    rng = random.Random(seed)
    items = questions()
    pools = {}
    for q in items:
        pools.setdefault(q["category"], [])
        if q["answer"] not in pools[q["category"]]:
            pools[q["category"]].append(q["answer"])
    rows = []
    for q in items:
        choices = rng.sample([a for a in pools[q["category"]] if a != q["answer"]], 3)
        gold = rng.randrange(4)
        choices.insert(gold, q["answer"])
        rows.append(
            {
                "query": f"Question: {q['question']}\nAnswer:",
                "choices": [f" {c}" for c in choices],
                "gold": gold,
                "category": q["category"],
            }
        )
    return rows


def aliases(answer: str) -> tuple[str, ...]:
    return ALIASES.get(answer, (answer,))


def contains_answer(text: str, answer_aliases) -> bool:
    """Whether ``text`` contains one of the aliases as a whole word (case-insensitive)."""
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", text, flags=re.IGNORECASE) for a in answer_aliases)
