#!/usr/bin/env python3
"""The labelled prompt set for complexity routing: tests/data/routing/prompts.jsonl.

    python3 tests/reference/build_routing_prompts.py [--out tests/data/routing/prompts.jsonl]

Python: the python3 first on PATH (pyenv); standard library only. Deterministic.

Each line is {"id", "label", "class", "source", "text"}:
  * label: "easy" (the small pool, Qwen2.5-Coder-0.5B-Instruct, answers it as well as a
    user needs) or "hard" (it wants the larger model: multi-step reasoning, non-trivial
    code, math, design, debugging, several constraints at once);
  * class: "sharegpt" (real prompts), "long_easy" (a long text with a simple task:
    summarise, translate, fix typos, extract, title...), "short_hard" (a few words that
    need real reasoning);
  * source: "sharegpt:<index>" into ../shared/traces/sharegpt-prompts-ml-energy/
    ShareGPT_V3_filtered_1000.json (first human turn), or "hand".

How the labels were made: by hand, by the session that wrote the router's scorer (an LLM
helper), reading each prompt against the rubric above, before the scorer was tuned. Real
prompts whose first turn is ambiguous (a pasted answer with no question, a role-play set-up)
were left out rather than guessed. The long_easy / short_hard prompts were written to probe
the two ways a length- or keyword-based router fails. The routing exemplars in
deploy/local/two-pool.yaml are separate texts, none of them in this set.
"""

import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHAREGPT = os.path.join(REPO, "..", "shared", "traces", "sharegpt-prompts-ml-energy",
                        "ShareGPT_V3_filtered_1000.json")

# ShareGPT indices by label. Long ones (pasted prose with a simple or no task) are
# class long_easy.
SHAREGPT_EASY = [2, 8, 9, 10, 15, 20, 22, 23, 25, 26, 27, 37, 38, 40, 45, 46, 55, 58, 67, 72,
                 76, 79, 85, 87, 88, 98, 109, 135, 137, 162, 174, 177, 187, 192, 198, 203, 205,
                 208, 235, 244, 254]
SHAREGPT_LONG_EASY = [0, 3, 12, 43, 61, 74, 77, 92]
SHAREGPT_HARD = [4, 11, 16, 19, 24, 41, 53, 63, 70, 75, 83, 91, 93, 94, 102, 108, 144, 185, 199,
                 221, 228, 231, 259]

SHORT_HARD = [
    "Prove that there are infinitely many primes of the form 4k+3.",
    "Implement a lock-free multi-producer multi-consumer queue in C++.",
    "Design a rate limiter for a distributed API gateway.",
    "Find all integer solutions of x^2 - 2y^2 = 1.",
    "Write a regex engine supporting *, +, ? and groups in Rust.",
    "Derive the backpropagation equations for an LSTM cell.",
    "Write an LRU cache with O(1) get and put that is thread-safe.",
    "Why does Raft need a leader lease for linearizable reads?",
    "Expected number of coin flips until three heads in a row?",
    "Implement Dijkstra's algorithm with a Fibonacci heap in C++.",
    "Evaluate the integral of x^2 e^{-x} from 0 to infinity.",
    "SQL: third highest salary per department without window functions.",
    "Design a schema for multi-tenant billing with proration.",
    "Why is double-checked locking broken in Java without volatile?",
    "Write a precedence-climbing parser for arithmetic expressions.",
    "How would you shard a 10 TB Postgres table with zero downtime?",
    "Prove that the halting problem is undecidable.",
    "Count lattice paths from (0,0) to (10,10) that never cross the diagonal.",
    "Implement consistent hashing with virtual nodes in Go.",
    "Write a CUDA kernel for a tiled matrix multiply.",
    "Make this O(n log n): for each i, count j > i with a[j] < a[i].",
    "Detect a cycle in a linked list using O(1) memory, and prove it works.",
]

# Long texts for the long_easy class (plain prose; the task is simple whatever the length).
TEXTS = {
    "review": (
        "I bought this blender three weeks ago after my old one finally gave up, and I have "
        "used it almost every morning since. The box arrived a day early and everything was "
        "packed well, with the jar wrapped in cardboard and the blades already fitted. Setting "
        "it up took a couple of minutes. The first thing I noticed is how quiet it is compared "
        "to my previous one; my partner no longer wakes up when I make a smoothie at six. It "
        "crushes ice without trouble and frozen berries turn smooth in about thirty seconds. "
        "The jar is heavy glass, which I like, although it makes the whole thing a bit awkward "
        "to lift when it is full. Cleaning is easy: a drop of soap, some warm water and the "
        "pulse button, then a rinse. The only real complaint I have is the lid, which is tight "
        "and hard to remove with wet hands, and the cord is shorter than I would like, so it "
        "has to sit right next to the socket. The colour is exactly as shown in the pictures. "
        "For the price I think it is good value, and I would buy it again, but I would not "
        "call it perfect. If the lid were easier to take off I would give it five stars."),
    "diary": (
        "We left the hotel early on Saturday and took the train along the coast. The carriage "
        "was almost empty, so we sat by the window and watched the fishing villages go by, "
        "with their blue and white boats pulled up on the sand. At the second stop an old man "
        "got on with a basket of lemons and offered us two, which we ate later with our lunch. "
        "The town at the end of the line is built on a hill, and every street seems to go up. "
        "We walked to the church at the top, where there is a small garden with orange trees "
        "and a view over the whole bay. In the afternoon it rained for an hour, so we sat in a "
        "cafe and played cards while the waiter told us about the festival that happens there "
        "every August, with music in the square and fireworks over the water. When the rain "
        "stopped we went down to the harbour, bought grilled sardines from a stall and watched "
        "the boats come in. We caught the last train back, tired and a little sunburnt, and "
        "agreed it had been the best day of the holiday so far. Tomorrow we plan to rest by "
        "the pool and maybe visit the market in the old town if the weather stays good."),
    "meeting": (
        "Notes from the team meeting on Tuesday. Present: Anna, Ben, Carla, David and Emma. "
        "Anna opened by thanking everyone for the work on the spring campaign, which finished "
        "on time and slightly under budget. Ben reported that the new website pages went live "
        "on the fourth and that visits are up about fifteen percent on last month, mostly "
        "from search. Carla said the printed brochures will arrive next Friday; she will "
        "bring a box to the office and send the rest to the regional shops. David raised the "
        "question of the summer party: the group agreed to hold it on the twenty-first of "
        "July in the park behind the office, with a rain plan of the canteen. Emma will book "
        "the catering and ask everyone about food allergies by the end of the month. There "
        "was a short discussion about the holiday calendar; people should enter their dates "
        "in the shared sheet by Monday so that two people are always in the office. Ben asked "
        "for volunteers to test the new booking form, and Carla and David offered. The next "
        "meeting will be on Tuesday the eighteenth at ten, in the small room on the second "
        "floor. Anna will send the agenda the day before."),
    "email": (
        "Dear Mrs Thompson, thank you for your letter of last week and for your kind words "
        "about our shop. I am sorry to hear that the lamp you ordered arived with a broken "
        "shade. We pack every item by hand, but sometimes things are damaged on the way, and "
        "we always want to put it right. I have arranged for a new shade to be sent to you "
        "today by courrier; it should reach you on Thursday or Friday. You do not need to "
        "return the broken one, but if you would like us to collect it, just let me know and "
        "we will arrange a pick up at a time that suits you. As an apology for the trouble, "
        "I have also added a voucher for ten pounds to your account, which you can use on "
        "your next order at any time this year. If the new shade does not arrive by Saturday, "
        "please call me directly on the number below and I will chase it with the delivery "
        "company. Thank you again for shopping with us, and for your patience. We hope you "
        "enjoy the lamp for many years. With best wishes, Margaret Hill, customer care "
        "manager, The Old Mill Lighting Company."),
    "newsletter": (
        "Welcome to the autumn edition of the community garden newsletter. It has been a busy "
        "season. Thanks to the volunteers who came every Sunday, the vegetable beds produced "
        "more than ever: we harvested over two hundred kilos of tomatoes, beans, courgettes "
        "and pumpkins, and most of it went to the food bank on Market Street. The new "
        "greenhouse, paid for by the summer fair, is now finished, and the school children "
        "have started growing winter salad in it as part of their science lessons. We also "
        "planted twelve apple trees along the north fence, donated by a local nursery. In "
        "October we will hold the harvest supper in the church hall; tickets are five pounds "
        "and include soup, bread and apple crumble made from our own fruit. Please bring a "
        "friend. We are still looking for someone to help look after the compost heaps and "
        "for a volunteer to update our notice board each month. Finally, a reminder that the "
        "garden gate is locked at dusk from the first of November, and that tools must be "
        "returned to the shed after use. Thank you all for making the garden such a friendly "
        "place."),
}
LONG_EASY_TASKS = [
    ("review", "Summarize this review in two sentences:\n\n{t}"),
    ("review", "Is this review positive or negative?\n\n{t}"),
    ("review", "Give this review a short title.\n\n{t}"),
    ("review", "Translate the following review into French:\n\n{t}"),
    ("diary", "Summarize this travel diary entry:\n\n{t}"),
    ("diary", "Translate this into Spanish:\n\n{t}"),
    ("diary", "Rewrite this in the present tense:\n\n{t}"),
    ("diary", "{t}\n\nWhat food is mentioned in the text above?"),
    ("meeting", "Turn these meeting notes into bullet points:\n\n{t}"),
    ("meeting", "{t}\n\nWhen is the next meeting?"),
    ("meeting", "Extract the names of everyone who attended:\n\n{t}"),
    ("meeting", "Write a short email reminding the team about the summer party, based on "
                "these notes:\n\n{t}"),
    ("email", "Fix the typos in this email:\n\n{t}"),
    ("email", "Make this email shorter and more friendly:\n\n{t}"),
    ("email", "{t}\n\nWho wrote this letter and what is it about?"),
    ("newsletter", "Write a headline for this newsletter:\n\n{t}"),
    ("newsletter", "Summarise the key points of this newsletter:\n\n{t}"),
    ("newsletter", "Proofread this text and correct any grammar mistakes:\n\n{t}"),
    ("newsletter", "{t}\n\nHow much do the harvest supper tickets cost?"),
    ("newsletter", "Write a tweet announcing the harvest supper based on this:\n\n{t}"),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "data", "routing",
                                                  "prompts.jsonl"))
    args = ap.parse_args()
    with open(SHAREGPT, encoding="utf-8") as f:
        sharegpt = json.load(f)
    rows = []

    def add(label, cls, source, text):
        rows.append({"id": len(rows), "label": label, "class": cls, "source": source,
                     "text": text})

    for i in SHAREGPT_EASY:
        add("easy", "sharegpt", f"sharegpt:{i}", sharegpt[i]["conversations"][0]["value"])
    for i in SHAREGPT_LONG_EASY:
        add("easy", "long_easy", f"sharegpt:{i}", sharegpt[i]["conversations"][0]["value"])
    for i in SHAREGPT_HARD:
        add("hard", "sharegpt", f"sharegpt:{i}", sharegpt[i]["conversations"][0]["value"])
    for t in SHORT_HARD:
        add("hard", "short_hard", "hand", t)
    for key, task in LONG_EASY_TASKS:
        add("easy", "long_easy", "hand", task.format(t=TEXTS[key]))
    assert len(set(r["text"] for r in rows)) == len(rows), "duplicate prompts"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    counts = {}
    for r in rows:
        counts[(r["label"], r["class"])] = counts.get((r["label"], r["class"]), 0) + 1
    print(f"{len(rows)} prompts -> {args.out}: {counts}")


if __name__ == "__main__":
    main()
