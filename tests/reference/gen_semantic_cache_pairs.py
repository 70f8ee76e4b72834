#!/usr/bin/env python3
"""Labelled prompt pairs for the semantic cache, built from real ShareGPT prompts.

Writes tests/data/semantic_cache/pairs.jsonl, read by
tests/router/semantic_cache_pairs_test.cc: the prompt `a` is cached, then `b` is
looked up; `label` says whether `b` should get `a`'s answer ("hit") or must not
("miss").

Usage (from the repository root):
  python3 tests/reference/gen_semantic_cache_pairs.py \
      [--shared ../shared] [--out tests/data/semantic_cache/pairs.jsonl]

Python: the first python3 on PATH (here pyenv CPython 3.11.7); standard library
only. Deterministic: the same input gives byte-identical output.

Source: ../shared/traces/sharegpt-prompts-ml-energy/ShareGPT_V3_filtered_1000.json
(first human turns; see its PROVENANCE.md). Kept: ASCII, one line, 20..220
characters, no code or URLs. Each pair starts from one such prompt `a` and
rewrites it by fixed rules (listed in RULES below, each pair records its rule):

  paraphrase (label hit): the request reworded the way users reword: a polite
    frame ("Could you ...?", "Please ...", "Can you help me: ...") around an
    imperative, "how do I" <-> "how can I", "what is" <-> "what's",
    "can you" <-> "could you", synonyms (explain -> describe, give me ->
    provide, create -> make, pros and cons -> advantages and disadvantages,
    ...), case and trailing punctuation. Numbers, negations and names are
    kept: the answer to `a` answers `b`.
  negation (miss): "is" -> "is not", "can" -> "cannot", "should" -> "should
    not", "with" -> "without", "do I" -> "do I not", or an imperative turned
    into "Do not ...".
  number (miss): a number in the prompt changed (digits: n -> n + 1, or a
    number word: five -> seven).
  entity (miss): a named thing swapped for another of its kind (Python -> Java,
    France -> Spain, AWS -> Azure, React -> Vue, ...), in the prompt's own case
    (a lowercase "python" becomes "java": the guard cannot see those, only
    the embedding threshold can).
"""

import argparse
import json
import os
import random
import re

IMPERATIVES = {
    "write", "explain", "give", "create", "generate", "list", "describe", "tell", "make",
    "suggest", "summarize", "provide", "show", "help", "find", "translate", "design",
    "compose", "draft", "teach", "recommend", "outline", "compare", "plan", "build", "act",
}

SYNONYMS = [
    (r"\bexplain\b", "describe"),
    (r"\bgive me\b", "provide me with"),
    (r"\bcreate\b", "make"),
    (r"\bgenerate\b", "produce"),
    (r"\bpros and cons\b", "advantages and disadvantages"),
    (r"\bsimple terms\b", "plain language"),
    (r"\bin detail\b", "thoroughly"),
    (r"\bsuggestions\b", "ideas"),
    (r"\bhelp me\b", "assist me"),
    (r"\bdifference between\b", "differences between"),
    (r"\bexamples\b", "samples"),
    (r"\bbest\b", "top"),
    (r"\bsimple\b", "easy"),
    (r"\bbig\b", "large"),
    (r"\bdevelop\b", "build"),
    (r"\bimprove\b", "enhance"),
    (r"\bneed\b", "require"),
    (r"\bwant\b", "would like"),
]

QUESTION_WORDS = {"what", "how", "why", "which", "who", "when", "where", "is", "are", "can",
                  "do", "does", "should", "could"}

NUMBER_WORDS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "twenty", "hundred"]

ENTITY_GROUPS = [
    ["Python", "Java", "Rust", "Ruby", "Kotlin", "JavaScript", "TypeScript", "Golang", "PHP",
     "Scala", "Swift", "Perl", "Haskell"],
    ["France", "Spain", "Germany", "Italy", "Japan", "Canada", "Brazil", "India", "Mexico",
     "China", "Egypt", "Kenya", "Norway"],
    ["Paris", "Berlin", "London", "Tokyo", "Chicago", "Boston", "Seattle", "Toronto", "Madrid",
     "Sydney", "Dubai", "Denver"],
    ["AWS", "Azure", "GCP", "Heroku", "DigitalOcean"],
    ["Google", "Microsoft", "Amazon", "Apple", "Netflix", "Tesla", "Facebook", "Twitter",
     "Oracle", "IBM", "Spotify", "Shopify", "Salesforce"],
    ["React", "Vue", "Angular", "Svelte", "Django", "Flask", "Laravel", "Rails", "Spring"],
    ["MySQL", "PostgreSQL", "MongoDB", "Redis", "Cassandra", "SQLite", "Snowflake",
     "Elasticsearch"],
    ["Linux", "Windows", "macOS", "Android", "iOS", "Ubuntu"],
    ["Instagram", "TikTok", "LinkedIn", "YouTube", "Reddit", "Pinterest"],
    ["Shakespeare", "Hemingway", "Tolkien", "Dickens", "Orwell"],
    ["Excel", "Notion", "Trello", "Jira", "Slack"],
    ["Chris", "Sarah", "John", "Emily", "David", "Maria"],
]
# Other capitalised names get one of these (a different thing of some kind).
FALLBACK_ENTITIES = ["Oracle", "Norway", "Kotlin", "Toronto", "Spotify", "Tolkien", "Redis",
                     "Ubuntu"]

# Sentence starters the guard does not take for names (router/semantic_cache.cc).
STARTERS = {
    "what", "how", "why", "when", "where", "who", "which", "whats", "what's", "is", "are",
    "can", "could", "would", "should", "do", "does", "did", "i", "i'm", "i'd", "i'll", "i've",
    "the", "a", "an", "this", "that", "these", "those", "it", "my", "we", "you", "your",
    "hi", "hello", "hey", "please", "let's", "lets", "if", "in", "for", "as", "there",
    "will", "pretend", "imagine", "hey", "ok", "okay", "so", "now", "here", "our", "give",
} | IMPERATIVES


def clean(p):
    return (p.isascii() and "\n" not in p and 20 <= len(p) <= 220 and "http" not in p
            and "{" not in p and "`" not in p and "|" not in p and "\\" not in p)


def strip_end(s):
    return s.rstrip().rstrip(".?!").rstrip()


def lower_first(s):
    w = s.split(" ", 1)[0]
    if w.lower() in STARTERS and not w.isupper():
        return s[0].lower() + s[1:]
    return s


def paraphrases(p):
    """(rule, text) candidates, most natural first."""
    out = []
    first = p.split(" ", 1)[0].lower().strip(",.:")
    body = strip_end(p)
    if first in IMPERATIVES:
        out.append(("frame:could-you", f"Could you {lower_first(body)}?"))
        out.append(("frame:please", f"Please {lower_first(body)}."))
        out.append(("frame:can-you-help", f"Can you help me: {lower_first(body)}"))
    swaps = [
        (r"^how do i\b", "how can I"), (r"^How do I\b", "How can I"),
        (r"^how can i\b", "how do I"), (r"^How can I\b", "How do I"),
        (r"^what is\b", "what's"), (r"^What is\b", "What's"),
        (r"^what's\b", "what is"), (r"^What's\b", "What is"),
        (r"^can you\b", "could you"), (r"^Can you\b", "Could you"),
        (r"^could you\b", "can you"), (r"^Could you\b", "Can you"),
        (r"^how to\b", "how do I"), (r"^How to\b", "How do I"),
    ]
    for pat, rep in swaps:
        if re.search(pat, p):
            out.append((f"swap:{pat}", re.sub(pat, rep, p, count=1)))
            break
    for pat, rep in SYNONYMS:
        if re.search(pat, p, flags=re.IGNORECASE):
            def keep_case(m, rep=rep):
                return rep[0].upper() + rep[1:] if m.group(0)[0].isupper() else rep
            out.append((f"synonym:{rep}", re.sub(pat, keep_case, p, count=1,
                                                 flags=re.IGNORECASE)))
            break
    if first in QUESTION_WORDS:
        out.append(("frame:quick-question", f"Quick question: {lower_first(p)}"))
        out.append(("frame:id-like-to-know", f"I'd like to know: {lower_first(p)}"))
    if p.endswith("?"):
        out.append(("punct:drop-question-mark", lower_first(p[:-1].rstrip())))
    elif first in IMPERATIVES:
        out.append(("polite:thanks", f"{body}, thanks!"))
    return [(r, t) for r, t in out if t != p]


NEGATIONS = [
    (r"\bis\b", "is not"), (r"\bare\b", "are not"), (r"\bcan\b", "cannot"),
    (r"\bshould\b", "should not"), (r"\bwill\b", "will not"), (r"\bwith\b", "without"),
    (r"\bdo I\b", "do I not"), (r"\bdoes\b", "does not"),
]


def negation(p):
    low = p.lower()
    if re.search(r"\b(not|no|never|without|n't|cannot)\b", low):
        return None
    for pat, rep in NEGATIONS:
        if re.search(pat, p):
            return (f"negate:{rep}", re.sub(pat, rep, p, count=1))
    first = p.split(" ", 1)[0].lower()
    if first in IMPERATIVES:
        return ("negate:do-not", f"Do not {lower_first(p)}")
    return None


def number_change(p):
    m = re.search(r"\b\d+\b", p)
    if m:
        n = int(m.group(0))
        new = str(n + 1) if n < 1000 else str(n + 10)
        return ("number:digits", p[:m.start()] + new + p[m.end():])
    for w in NUMBER_WORDS:
        m = re.search(rf"\b{w}\b", p, flags=re.IGNORECASE)
        if m:
            i = NUMBER_WORDS.index(w)
            new = NUMBER_WORDS[(i + 2) % len(NUMBER_WORDS)]
            if m.group(0)[0].isupper():
                new = new.capitalize()
            return ("number:word", p[:m.start()] + new + p[m.end():])
    return None


def entity_change(p, rng):
    for group in ENTITY_GROUPS:
        for name in group:
            for variant in (name, name.lower()):
                m = re.search(rf"\b{re.escape(variant)}\b", p)
                if m:
                    other = group[(group.index(name) + 1) % len(group)]
                    if variant != name:
                        other = other.lower()
                    kind = "entity:known" if variant == name else "entity:known-lowercase"
                    return (kind, p[:m.start()] + other + p[m.end():])
    # A capitalised word that does not start the prompt (a name the guard sees).
    for m in re.finditer(r"(?<=[a-z,] )([A-Z][a-zA-Z]{2,})\b", p):
        word = m.group(1)
        if word.lower() in STARTERS:
            continue
        other = rng.choice([e for e in FALLBACK_ENTITIES if e != word])
        return ("entity:other", p[:m.start(1)] + other + p[m.end(1):])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                     "..", "shared"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data",
                                                  "semantic_cache", "pairs.jsonl"))
    args = ap.parse_args()
    src = os.path.join(args.shared, "traces", "sharegpt-prompts-ml-energy",
                       "ShareGPT_V3_filtered_1000.json")
    with open(src, encoding="utf-8") as f:
        data = json.load(f)
    prompts = []
    seen = set()
    for conv in data:
        p = conv["conversations"][0]["value"].strip()
        if clean(p) and p.lower() not in seen:
            seen.add(p.lower())
            prompts.append((conv["id"], p))
    rng = random.Random(20261201)
    pairs = []
    for sid, p in prompts:
        paras = paraphrases(p)
        # Prefer a reworded request over punctuation or a "thanks"; sometimes
        # a synonym on top of it.
        substantive = [x for x in paras if not x[0].startswith(("punct:", "polite:"))]
        if substantive:
            paras = substantive
        if paras:
            rule, text = paras[rng.randrange(len(paras))]
            if not rule.startswith("synonym:") and rng.random() < 0.5:
                for r2, t2 in paraphrases(text):
                    if r2.startswith("synonym:"):
                        rule, text = f"{rule}+{r2}", t2
                        break
            pairs.append({"source_id": sid, "kind": "paraphrase", "label": "hit", "rule": rule,
                          "a": p, "b": text})
        for kind, fn in (("negation", negation), ("number", number_change),
                         ("entity", lambda q: entity_change(q, rng))):
            r = fn(p)
            if r is not None and r[1] != p:
                pairs.append({"source_id": sid, "kind": kind, "label": "miss", "rule": r[0],
                              "a": p, "b": r[1]})
    # Bounded size: every number / entity pair, negations and paraphrases
    # sampled (deterministically) down.
    by_kind = {}
    for pair in pairs:
        by_kind.setdefault(pair["kind"], []).append(pair)
    limits = {"paraphrase": 160, "negation": 70, "number": 70, "entity": 70}
    out = []
    for kind in ("paraphrase", "negation", "number", "entity"):
        items = by_kind.get(kind, [])
        if len(items) > limits[kind]:
            items = sorted(rng.sample(items, limits[kind]), key=lambda x: x["source_id"])
        out.extend(items)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        for i, pair in enumerate(out):
            pair = {"id": i, **pair}
            f.write(json.dumps(pair, ensure_ascii=False) + "\n")
    counts = {k: sum(1 for p in out if p["kind"] == k) for k in limits}
    print(f"{len(out)} pairs from {len(prompts)} prompts: {counts} -> {args.out}")


if __name__ == "__main__":
    main()
