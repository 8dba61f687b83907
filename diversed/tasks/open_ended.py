"""open: open-ended instructions without references, judged by reference-free fidelity only
(target log-likelihood per token, agreement with the target's greedy choice), as users judge lossy
verifiers on chat prompts."""

from __future__ import annotations

from diversed.tasks import FIDELITY, Example, Task

PROMPTS = [
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


class OpenEnded(Task):
    name = "open"
    metric = FIDELITY
    fields = ("prompt",)
    max_new_tokens = 128

    def source_rows(self, split: str) -> list[dict]:
        half = len(PROMPTS) // 2  # disjoint train / eval halves
        return [{"prompt": p} for p in (PROMPTS[:half] if split == "train" else PROMPTS[half:])]

    def to_example(self, row: dict, id: str) -> Example:
        return Example(id, row["prompt"], None)

    def score(self, completion: str, example: Example) -> dict[str, float]:
        return {}  # fidelity comes from the decoding run itself (diversed.evaluate)
