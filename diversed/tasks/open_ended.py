"""open: open-ended instructions without references, judged by reference-free fidelity only
(target log-likelihood per token, agreement with the target's greedy choice), as users judge lossy
verifiers on chat prompts."""

from __future__ import annotations

from typing import ClassVar

from diversed.tasks.base import FIDELITY, Example, Task

OPEN_PROMPTS = [  # the first half trains, the second half is reported
    "Explain in two sentences why the sky is blue.",
    "Write a short poem about autumn leaves.",
    "Give three tips for staying focused while studying.",
    "Describe how a bicycle works to a child.",
    "What are the benefits of drinking water?",
    "Write a friendly email inviting a colleague to lunch.",
    "Summarize the plot of Cinderella in three sentences.",
    "List five animals that live in the ocean and one fact about each.",
    "How do plants make their food?",
    "Write a short story about a robot who learns to paint.",
    "What is the difference between weather and climate?",
    "Suggest a healthy breakfast and explain why it is healthy.",
    "Explain what a computer program is in simple words.",
    "Give advice to someone starting to learn the guitar.",
    "Why do we have seasons on Earth?",
    "Describe your ideal weekend in a few sentences.",
    "What should I pack for a day at the beach?",
    "Explain how to make a cup of tea step by step.",
    "Write a motivational message for a friend before an exam.",
    "What are three ways to reduce plastic waste at home?",
    "Describe the water cycle.",
    "Why is exercise important for health?",
    "Write a haiku about the moon.",
    "How does a library help a community?",
]
DEV_PROMPTS = [  # the sweep's (selection) prompts
    "Explain why bread goes stale.",
    "Write a limerick about a cat who loves to swim.",
    "Give four ideas for a rainy afternoon indoors.",
    "Describe how a rainbow forms.",
    "What makes a good friend?",
    "Write a thank-you note to a neighbour who watered your plants.",
    "How do bees help flowers?",
    "Explain what recycling is to a five-year-old.",
    "Why do leaves change colour in autumn?",
    "Write a short story about a lost umbrella.",
    "List three tips for keeping a houseplant alive.",
    "What is a good way to start the morning?",
]


class OpenEnded(Task):
    name = "open"
    metric = FIDELITY
    fields = ("prompt",)
    max_new_tokens = 128
    sources: ClassVar[dict[str, str]] = {"train": "train", "dev": "dev", "eval": "eval"}

    def source_rows(self, source: str) -> list[dict]:
        half = len(OPEN_PROMPTS) // 2
        prompts = {"train": OPEN_PROMPTS[:half], "dev": DEV_PROMPTS, "eval": OPEN_PROMPTS[half:]}[source]
        return [{"prompt": p} for p in prompts]

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, row["prompt"], None)

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return {}  # fidelity comes from the decoding run itself (diversed.runs.evaluate)
