"""The fictional world of the embedded library (:mod:`dynakrag_lite.data.library`, chapter 1):
invented names built from random syllables, the filler sentences that pad a paragraph, and
:class:`World`, the seeded random generator plus the registry of every name handed out, which
writes the paragraphs the question templates of :mod:`dynakrag_lite.data.library` assemble.

Everything comes from the one ``random.Random`` the library is built with; the order of the
calls is part of the output (the library's questions, and so their data hash, depend on it)."""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Callable

from .schema import Paragraph

__all__ = ["World", "Person", "with_article", "BAND_NOUNS", "BOOK_PATTERNS", "COMPANY_KIND",
           "FILM_PATTERNS", "GENRES", "INSTRUMENTS", "MONTHS", "OCCUPATIONS",
           "PRODUCT_PATTERNS", "PRONOUNS", "SONG_PATTERNS", "STUDIO_KIND"]

# ---------------------------------------------------------------------------------------------
# Name generation: syllable soup, checked for uniqueness.

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r",
           "s", "sk", "st", "t", "th", "v", "z", "c", "j")
_VOWELS = ("a", "e", "i", "o", "u", "a", "e", "o", "ae", "ei", "ou")
_CODAS = ("", "", "", "n", "r", "l", "s", "m", "th", "v", "nd", "sk")
_SOFT_CODAS = ("", "", "", "", "n", "r", "l")
_TOWN_SUFFIX = ("ford", "mere", "wick", "dale", "haven", "holm", "stead", "by", "brook")
_COUNTRY_SUFFIX = ("ia", "land", "ora", "avia", "esh", "onia", "ary")
COMPANY_KIND = (("Motors", "touring cars"), ("Textiles", "woollen cloth"),
                 ("Foods", "tinned fish"), ("Instruments", "precision scales"),
                 ("Cycleworks", "bicycles"), ("Ceramics", "glazed tiles"))
STUDIO_KIND = ("Pictures", "Films", "Studios", "Cinema")
FILM_PATTERNS = ("The Lantern of {s}", "Winter in {s}", "Return to {s}", "The {s} Affair",
                  "A Harvest for {s}", "The Mirror of {s}", "Last Train to {s}")
BAND_NOUNS = ("Sparrows", "Lanterns", "Orchards", "Tides", "Engines", "Foxes", "Mirrors")
BOOK_PATTERNS = ("The Salt Road to {s}", "Letters from {s}", "The Clockmaker of {s}",
                  "Autumn at {s}", "The {s} Ledger")
SONG_PATTERNS = ("Lullaby for {s}", "The {s} Waltz", "Rain over {s}", "{s} by Night")
PRODUCT_PATTERNS = ("{s} Roadster", "{s} Mk II", "{s} Tourer", "{s} 300")
GENRES = ("folk-rock", "post-punk", "synth-pop", "bluegrass", "shoegaze", "jazz-funk")
INSTRUMENTS = ("cello", "accordion", "banjo", "oboe", "harp", "mandolin", "trombone",
                "clarinet")
OCCUPATIONS = ("painter", "engineer", "cartographer", "chemist", "architect", "diplomat",
                "carpenter", "novelist")
_INDUSTRIES = ("fishing", "wool", "glassmaking", "timber", "salt mining", "boatbuilding")
_EXPORTS = ("copper and rye", "amber and timber", "wool and cheese", "salt and tin")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December")

# Filler sentences: neutral facts that pad a paragraph to 2-4 sentences.
_FILLERS: dict[str, tuple[str, ...]] = {
    "person": (
        "{Pron} trained as a bookbinder before changing careers.",
        "{Pron} is known for a long-running radio programme about coastal birds.",
        "In {year} {pron} received a regional prize for public service.",
        "{Pron} keeps a small orchard and writes a weekly newspaper column.",
        "{Pron} spent several winters teaching evening classes in carpentry.",
        "Colleagues describe {obj} as meticulous and quietly funny.",
        "{Pron} speaks four languages and collects antique maps.",
    ),
    "town": (
        "It has a population of about {pop}.",
        "Its old market hall dates from {year}.",
        "The local economy relies on {industry}.",
        "A narrow-gauge railway reached the settlement in {year}.",
        "A lantern festival is held there every autumn.",
    ),
    "country": (
        "It is a parliamentary republic of about {mil} million people.",
        "Its main exports are {exports}.",
        "It adopted its present constitution in {year}.",
    ),
    "river": (
        "Its basin is known for {industry}.",
        "Several stone bridges built before {year} still cross it.",
        "Its upper course freezes for part of the winter.",
    ),
    "label": (
        "Its catalogue lists more than {n} releases.",
        "The label is known for reissuing out-of-print folk recordings.",
        "It moved into a converted warehouse in {year}.",
    ),
    "studio": (
        "It employs around {n} people.",
        "Its back lot was rebuilt after a fire in {year}.",
    ),
    "film": (
        "It premiered at a regional festival in {year}.",
        "The film runs for {mins} minutes.",
        "Critics praised its cinematography.",
    ),
    "band": (
        "Their debut album appeared in {year}.",
        "They have toured widely since {year}.",
        "The group has released {small} studio albums.",
    ),
    "company": (
        "The firm employs around {n} people.",
        "Its annual report for {year} showed its highest profits to date.",
        "It opened a second plant in {year}.",
    ),
    "product": (
        "Production began in {year}.",
        "About {n} units were sold in the first year.",
    ),
    "book": (
        "It was shortlisted for a regional fiction prize in {year}.",
        "It has been translated into {small} languages.",
    ),
    "song": (
        "It was later covered by several choirs.",
        "It became a minor radio hit in {year}.",
    ),
    "mountain": (
        "Its first recorded ascent was in {year}.",
        "Its slopes are covered in pine forest.",
    ),
    "landmark": (
        "It was restored in {year}.",
        "It is a protected monument.",
        "Visitors can reach it by a footpath from the nearest village.",
    ),
    "academy": (
        "It enrols about {n} students.",
        "Its library holds a notable collection of early maps.",
    ),
}
PRONOUNS = {"he": {"pron": "he", "Pron": "He", "obj": "him", "poss": "his"},
             "she": {"pron": "she", "Pron": "She", "obj": "her", "poss": "her"}}

# Words a generated name must never equal (template vocabulary), so names stay names.
_RESERVED = frozenset(re.findall(r"[a-z]+", " ".join(
    [s for pool in _FILLERS.values() for s in pool]
    + list(GENRES) + list(INSTRUMENTS) + list(OCCUPATIONS) + list(_INDUSTRIES)
    + ["born", "town", "river", "founder", "native", "country", "capital", "sea", "mount",
       "records", "studios", "bridge", "lake", "valley", "company", "film", "band", "play",
       "lead", "singer", "author", "study", "spouse", "married", "flows", "into", "same"]
).lower()))


def with_article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


@dataclass(frozen=True)
class Person:
    name: str
    first: str
    last: str
    gender: str  # "he" | "she"


@dataclass
class World:
    """The seeded RNG plus a registry of every name handed out (titles stay unique)."""
    rng: random.Random
    used: set[str] = field(default_factory=set)       # lowercased names/stems (membership only)
    titles: set[str] = field(default_factory=set)

    # -- names ---------------------------------------------------------------------------------
    def stem(self, syllables: int | None = None) -> str:
        """A fresh pronounceable invented word, never handed out before."""
        for _ in range(10_000):
            k = syllables or self.rng.choice((2, 2, 3))
            # Inner syllables take only soft codas, so names stay pronounceable.
            w = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS)
                        + self.rng.choice(_CODAS if j == k - 1 else _SOFT_CODAS)
                        for j in range(k))
            if not 5 <= len(w) <= 9 or w in _RESERVED or w in self.used:
                continue
            self.used.add(w)
            return w.capitalize()
        raise RuntimeError("name space exhausted")

    def fresh(self, make: Callable[[], str]) -> str:
        for _ in range(1000):
            name = make()
            if name.lower() not in self.used:
                self.used.add(name.lower())
                return name
        raise RuntimeError("name space exhausted")

    def person(self, last: str | None = None) -> Person:
        first = self.stem(2)
        last = last or self.stem()
        name = self.fresh(lambda: f"{first} {last}")
        return Person(name, first, last, self.rng.choice(("he", "she")))

    def relative(self, p: Person) -> Person:
        """Another person sharing p's surname: a distractor for the bridge entity itself."""
        return self.person(last=p.last)

    def town(self) -> str:
        return self.stem(2) + self.rng.choice(_TOWN_SUFFIX)

    def country(self) -> str:
        return self.stem(2) + self.rng.choice(_COUNTRY_SUFFIX)

    def pattern(self, patterns: tuple[str, ...], s: str | None = None) -> str:
        s = s or self.stem()
        return self.fresh(lambda: self.rng.choice(patterns).format(s=s))

    def year(self, lo: int = 1900, hi: int = 2015) -> int:
        return self.rng.randint(lo, hi)

    # -- paragraphs ----------------------------------------------------------------------------
    def _filler_values(self, gender: str, since: int) -> dict[str, object]:
        r = self.rng
        vals: dict[str, object] = dict(PRONOUNS[gender])
        vals.update(year=r.randint(min(since, 2020), 2020), n=r.randint(40, 900),
                    small=r.randint(2, 9),
                    pop=f"{r.randint(2, 90) * 1000 + r.randint(1, 9) * 100:,}",
                    mil=r.randint(2, 40), mins=r.randint(82, 140),
                    industry=r.choice(_INDUSTRIES), exports=r.choice(_EXPORTS))
        return vals

    def para(self, title: str, lead: list[str], kind: str, supporting: bool = False,
             person: Person | None = None, n_fill: int | None = None) -> Paragraph:
        """A 2-4 sentence paragraph: the lead fact sentence(s) plus neutral filler."""
        if title in self.titles:  # a bug in a template, not bad luck: names are registered
            raise RuntimeError(f"duplicate library title {title!r}")
        self.titles.add(title)
        gender = person.gender if person else "he"
        pool = list(_FILLERS[kind])
        self.rng.shuffle(pool)
        k = n_fill if n_fill is not None else self.rng.randint(1, max(1, 4 - len(lead)))
        # Filler years never precede the paragraph's own dates (a prize before birth, a
        # move before founding), and for people start at adulthood.
        years = [int(y) for y in re.findall(r"\b(1[89]\d\d|20[0-2]\d)\b", " ".join(lead))]
        since = (max(years) if years else 1950) + (18 if kind == "person" and years else 0)
        vals = self._filler_values(gender, since)
        sentences = lead + [s.format(**vals) for s in pool[:k]]
        return Paragraph(title=title, text=" ".join(sentences), is_supporting=supporting)

    # -- generic distractors: a fresh unrelated entity of a given kind --------------------------
    def generic(self, kind: str) -> Paragraph:
        r = self.rng
        if kind == "person":
            p = self.person()
            return self.para(p.name, [f"{p.name} was born in the town of {self.town()} in "
                                      f"{self.year(1930, 1995)}."], "person", person=p)
        if kind == "town":
            t = self.town()
            return self.para(t, [f"{t} is a small market town in {self.country()}."], "town")
        if kind == "country":
            c = self.country()
            return self.para(c, [f"{c} is a country whose capital is {self.town()}."],
                             "country")
        if kind == "river":
            rv = self.stem()
            return self.para(f"{rv} River", [f"The {rv} River flows through {self.town()} "
                                             f"and is {r.randint(80, 900)} kilometres long."],
                             "river")
        if kind == "label":
            lb = f"{self.stem()} Records"
            return self.para(lb, [f"{lb} is a record label founded by {self.person().name} "
                                  f"in {self.year(1950, 2010)}."], "label")
        if kind == "film":
            f = self.pattern(FILM_PATTERNS)
            return self.para(f, [f"{f} is a {self.year(1950, 2015)} film directed by "
                                 f"{self.person().name}."], "film")
        if kind == "band":
            b = f"The {self.stem()} {r.choice(BAND_NOUNS)}"
            return self.para(b, [f"{b} are a {r.choice(GENRES)} band from {self.town()}."],
                             "band")
        if kind == "company":
            word, goods = r.choice(COMPANY_KIND)
            c = f"{self.stem()} {word}"
            return self.para(c, [f"{c} is a company making {goods}, founded in "
                                 f"{self.year()} in {self.town()}."], "company")
        if kind == "book":
            bk = self.pattern(BOOK_PATTERNS)
            return self.para(bk, [f"{bk} is a {self.year(1950, 2015)} novel by "
                                  f"{self.person().name}."], "book")
        if kind == "mountain":
            m = f"Mount {self.stem()}"
            return self.para(m, [f"{m} is a peak rising to {r.randint(900, 4800)} metres."],
                             "mountain")
        if kind == "studio":
            s = f"{self.stem()} {r.choice(STUDIO_KIND)}"
            return self.para(s, [f"{s} is a film studio founded in {self.country()} in "
                                 f"{self.year(1920, 2000)}."], "studio")
        if kind == "song":
            s = self.pattern(SONG_PATTERNS)
            return self.para(s, [f"\"{s}\" is a ballad written for the film "
                                 f"{self.pattern(FILM_PATTERNS)}."], "song")
        raise ValueError(kind)
