"""The differential oracle: Megatron-Bridge's packed path checked against MB's own unpacked path.

A golden recorded on one MB release pins that release's behaviour, bugs included; a rule written
into a suite pins its author's reading of MB. Neither can tell a fix from a regression. The
oracle instead takes its reference from MB itself, at the commit under test: the same examples,
run through MB's unpacked dataset and collate, must give per real token the same tokens, labels,
loss mask and position ids as MB's packed dataset and collate, and (forward suites) the same
logits and per-token loss; padding must never train. No suite decides which token ids train.

* :mod:`harness.suite.oracle.tokenizer` - a real tokenizer written at test time (no download);
* :mod:`harness.suite.oracle.corpus` - seeded JSONL examples the way a user's data looks;
* :mod:`harness.suite.oracle.differential` - pure comparison: segments, invariants, violations
  (records in :mod:`harness.records.oracle`, THD boundary checks in :mod:`harness.suite.oracle.boundaries`).
"""
