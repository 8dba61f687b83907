"""capitals: "What is the capital of X?", judged by whether the answer names the capital (any accepted spelling).

Offline and built in, for the embedded default: a fact SmolLM2-135M-Instruct knows and its 2-layer distilled
draft does not, so following the draft costs quality. Measured on 30 well-known countries: the target answers
25 at T = 0.1 and 15 at T = 1 (its answers vary, so the head's reward varies within a batch), the draft alone none
at either. The 120 countries range from well known to obscure; one seeded partition divides them
train:dev:eval = 2:1:2 (tasks.SHARES).
"""

from __future__ import annotations

import re
import unicodedata
from typing import ClassVar

from diversed.tasks.base import Example, Task
from diversed.tasks.common import ACCURACY

CAPITALS = {  # country: capital, or the accepted spellings of it
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Japan": "Tokyo",
    "China": ("Beijing", "Peking"), "Russia": "Moscow", "Egypt": "Cairo", "Canada": "Ottawa", "Greece": "Athens",
    "Portugal": "Lisbon", "Austria": "Vienna", "Norway": "Oslo", "Sweden": "Stockholm", "Ireland": "Dublin",
    "Poland": "Warsaw", "Kenya": "Nairobi", "Peru": "Lima", "Thailand": "Bangkok", "England": "London",
    "the United Kingdom": "London", "Argentina": "Buenos Aires", "Cuba": "Havana", "Denmark": "Copenhagen",
    "Finland": "Helsinki", "Hungary": "Budapest", "South Korea": "Seoul", "Belgium": "Brussels",
    "the Netherlands": "Amsterdam", "Mexico": "Mexico City", "the United States": "Washington",
    "Australia": "Canberra", "Brazil": "Brasília", "India": ("New Delhi", "Delhi"), "Turkey": "Ankara",
    "Iran": "Tehran", "Iraq": "Baghdad", "Saudi Arabia": "Riyadh", "Israel": "Jerusalem", "Syria": "Damascus",
    "Lebanon": "Beirut", "Jordan": "Amman", "Pakistan": "Islamabad", "Afghanistan": "Kabul",
    "Bangladesh": "Dhaka", "Nepal": "Kathmandu", "Sri Lanka": ("Colombo", "Sri Jayawardenepura Kotte"),
    "Vietnam": "Hanoi", "Indonesia": "Jakarta", "the Philippines": "Manila", "Malaysia": "Kuala Lumpur",
    "Singapore": "Singapore", "North Korea": "Pyongyang", "Mongolia": ("Ulaanbaatar", "Ulan Bator"),
    "Taiwan": "Taipei", "Cambodia": "Phnom Penh", "Laos": "Vientiane", "Myanmar": ("Naypyidaw", "Yangon"),
    "New Zealand": "Wellington", "Fiji": "Suva", "Chile": "Santiago", "Colombia": "Bogotá",
    "Venezuela": "Caracas", "Ecuador": "Quito", "Bolivia": ("Sucre", "La Paz"), "Paraguay": "Asunción",
    "Uruguay": "Montevideo", "Jamaica": "Kingston", "Haiti": "Port-au-Prince", "Panama": "Panama City",
    "Costa Rica": "San José", "Nicaragua": "Managua", "Honduras": "Tegucigalpa", "Guatemala": "Guatemala City",
    "El Salvador": "San Salvador", "Switzerland": ("Bern", "Berne"), "Czechia": "Prague",
    "the Czech Republic": "Prague", "Slovakia": "Bratislava", "Romania": "Bucharest", "Bulgaria": "Sofia",
    "Serbia": "Belgrade", "Croatia": "Zagreb", "Slovenia": "Ljubljana", "Ukraine": ("Kyiv", "Kiev"),
    "Belarus": "Minsk", "Lithuania": "Vilnius", "Latvia": "Riga", "Estonia": "Tallinn", "Iceland": "Reykjavik",
    "Luxembourg": "Luxembourg", "Albania": "Tirana", "Scotland": "Edinburgh", "Wales": "Cardiff",
    "Morocco": "Rabat", "Algeria": "Algiers", "Tunisia": "Tunis", "Libya": "Tripoli", "Nigeria": "Abuja",
    "Ghana": "Accra", "Ethiopia": "Addis Ababa", "Somalia": "Mogadishu", "Sudan": "Khartoum",
    "Uganda": "Kampala", "Tanzania": ("Dodoma", "Dar es Salaam"), "Rwanda": "Kigali", "Zambia": "Lusaka",
    "Zimbabwe": "Harare", "Angola": "Luanda", "Mozambique": "Maputo", "Madagascar": "Antananarivo",
    "Senegal": "Dakar", "Mali": "Bamako", "Niger": "Niamey", "Chad": "N'Djamena", "Cameroon": "Yaoundé",
    "Namibia": "Windhoek", "Botswana": "Gaborone", "Qatar": "Doha", "Kuwait": "Kuwait City", "Oman": "Muscat",
    "Yemen": "Sanaa", "the United Arab Emirates": "Abu Dhabi", "Kazakhstan": "Astana", "Uzbekistan": "Tashkent",
    "Georgia": "Tbilisi", "Armenia": "Yerevan", "Azerbaijan": "Baku",
}


def _plain(text: str) -> str:
    """Lower case, accents dropped (Brasília = Brasilia), so an answer's spelling of a name still matches."""
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c)).lower()


class Capitals(Task):
    name = "capitals"
    metric = ACCURACY
    max_new_tokens = 32
    fields = ("country", "capital")
    sources: ClassVar[dict[str, str]] = {"train": "all", "dev": "all", "eval": "all"}  # one list, partitioned

    def source_rows(self, source: str) -> list[dict]:
        return [{"country": c, "capital": list(a) if isinstance(a, tuple) else [a]} for c, a in CAPITALS.items()]

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, f"What is the capital of {row['country']}?", row["capital"])

    @staticmethod
    def spellings(reference) -> list:
        """A reference's accepted spellings: a list of names, or one name as a plain string."""
        return [reference] if isinstance(reference, str) else reference

    def check_reference(self, example: Example) -> None:
        answers = self.spellings(example.reference)
        if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
            raise ValueError(f"task capitals: a reference is a capital's name or a list of its spellings, got "
                             f"{example.reference!r}")

    def score(self, completion: str, example: Example) -> dict[str, float]:
        text = _plain(completion or "")
        named = any(re.search(rf"\b{re.escape(_plain(a))}\b", text) for a in self.spellings(example.reference))
        return {"accuracy": float(named)}
