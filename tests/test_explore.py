"""Exploration draws reproducibly, shrinks a failure to a replayable case, and keeps it when saved.

* a spec round-trips to the same case and id; a bad spec is a one-line usage error;
* the same seed draws the same cases (a nightly's exploration can be repeated);
* end to end on the installed MB: with literal EOS allowed in answers, ``harness explore`` finds
  MB 0.6.2's known EOS masking (the exploration's own negative control: it must turn red on a
  real MB bug), prints a minimal case as ``replay:``; the printed reproduce command fails the
  same way; ``--save`` keeps it, and the next ``harness run`` of the suite checks it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.records import explored
from harness.suite.adapters.rules import Rule
from suites import _explore


def test_a_spec_names_one_case_and_round_trips():
    case = _explore.from_spec('{"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}')
    again = _explore.from_spec(_explore.to_spec(case))
    assert again == case
    assert case.id == again.id and case.id.startswith("explored-")
    with pytest.raises(ValueError, match="not an explored case spec"):
        _explore.from_spec('{"no_such_field": 1}')
    with pytest.raises(ValueError, match="not a JSON object"):
        explored.parse("[1, 2]")


def test_every_registered_space_has_its_tests_and_is_told_apart_by_its_field():
    """The space registry (harness/records/explored.py) is what ``harness explore`` and the saved cases
    read: each space's drawing and saved-case tests exist in the exploration suite, a spec with a space's
    field belongs to that space, and a drawn case's axis names the same space."""
    import ast

    from harness.commands import explore as explore_command

    suite = Path(_explore.__file__).with_name("test_explore.py")
    # module level, or inside the `if SAVED_...:` that defines a saved-case test only where cases are saved
    tests = {n.name for n in ast.walk(ast.parse(suite.read_text())) if isinstance(n, ast.FunctionDef)}
    for s in explored.SPACES:
        assert {s.test, s.saved_test} <= tests, f"{s.name}: {s.test} or {s.saved_test} not in {suite}"
        assert explore_command.TESTS[s.name] == s.test and explore_command.SAVED_TESTS[s.name] == s.saved_test
    for s in explored.MARKED:
        assert s.field is not None and explored.space({s.field: True, "cp": 2}) == s.name
        case = _explore.ExploredCase(id="", seed=0, **{s.field: {"x": 1} if s.field == "config" else True})
        assert case.axis == s.name
    assert explored.space({"cp": 2}) == "layouts" and explored.space({"seed": 1}) == "data"


def test_a_saved_case_is_named_by_its_file(tmp_path):
    """A spec saved with fields left at their defaults (as a user may type it) is checked under the id
    ``--save`` printed and named its file by; a full spec keeps the id it always had."""
    trimmed = {"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}
    full = json.loads(_explore.to_spec(_explore.from_spec(trimmed)))
    paths = [explored.save(tmp_path, spec) for spec in (trimmed, full)]
    cases = _explore.saved(tmp_path)
    assert sorted(c.id for c in cases) == sorted(p.stem for p in paths)
    assert _explore.from_spec(full).id in {c.id for c in cases}
    assert cases[0].__class__ is _explore.ExploredCase and {c.seed for c in cases} == {3}


def _draw(strategy, n: int, s: int = 0) -> list[_explore.ExploredCase]:
    from hypothesis import given, seed, settings

    out: list[_explore.ExploredCase] = []

    @seed(s)
    @settings(max_examples=n, database=None, deadline=None)
    @given(strategy)
    def collect(case):
        out.append(case)

    collect()
    return out


def test_the_same_seed_draws_the_same_cases():
    def ids(s: int) -> list[str]:
        return [c.id for c in _draw(_explore.cases(), 6, s)]

    assert ids(5) == ids(5)
    assert ids(5) != ids(6)


def test_layout_cases_follow_mbs_rules_and_name_their_space():
    """A drawn layout is one MB supports, configured as MB documents it: CP packs on 2*CP, a global
    batch is whole steps of micro * DP, in-batch packing leaves offline knobs at their defaults,
    the forward stays within the tiny model's positions; the spec names its space, round-trips,
    and a data case's id is what it was before layouts existed."""
    drawn = _draw(_explore.layout_cases(), 60)
    assert set(_explore.AXES) <= {c.axis for c in drawn} <= {*_explore.AXES, "dp_cp"}
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert explored.space(spec) == "layouts" and _explore.from_spec(spec) == case
        if case.axis == "cp":
            assert case.mult == 2 * case.cp and case.cp in (2, 4)
        if case.axis == "dp":
            assert case.gbs % (case.mbs * case.dp) == 0 and case.dp in (2, 4)
        if case.axis == "in_batch":
            assert (case.mult, case.pad_to_max_length, case.pad_cu_seqlens) == (1, False, False)
            assert case.sp is False or case.tp > 1
        if case.axis == "forward":
            assert case.seq in _explore.FORWARD_SEQS
        if case.axis == "dp_cp":  # CP 2 on two data-parallel ranks, one row per rank and step
            assert (case.dp, case.cp, case.mult, case.gbs) == (2, 2, 4, 2)
    # seed 4's 12 draws hold a DP x CP world (a fixed seed: such a world is a rare draw)
    both = next(c for c in _draw(_explore.layout_cases(), 12, s=4) if c.axis == "dp_cp")
    spec = json.loads(_explore.to_spec(both))
    assert spec["dp"] == 2 and spec["cp"] == 2 and _explore.from_spec(spec) == both
    for case in _draw(_explore.cases(), 10):
        spec = json.loads(_explore.to_spec(case))
        assert case.axis is None and explored.space(spec) == "data"
        assert not set(spec) & {"cp", "pp", "dp", "tp", "sp", "mbs", "gbs", "in_batch", "forward"}
    # a spec saved before layouts existed keeps its id (the id the harness gave it at 472e6f3)
    old = {"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}
    assert _explore.from_spec(old).id == "explored-99abd75737"


def test_direct_cases_are_direct_sft_configs_mb_documents():
    """A drawn direct case is a config of MB's direct HF SFT path: a preprocessing that path has
    (no prompt template), no truncation side for chat, no pad_to_max_length with in-batch packing,
    no offline knob, a pack size every drawn layout's CP/SP split divides, one or two pipeline
    stages; its spec names the direct space and round-trips, and the request carries the knobs as
    ``DirectHFSFTDatasetConfig`` fields and the stages as its pipeline."""
    from suites import _directsft, _explore_direct

    drawn = _draw(_explore_direct.direct_cases(), 40)
    assert {c.in_batch for c in drawn} == {True, False} and {c.kind for c in drawn} == set(_explore_direct.DIRECT_KINDS)
    assert {c.pp for c in drawn} == {1, 2}
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert case.axis == "direct" and explored.space(spec) == "direct" and _explore.from_spec(spec) == case
        assert not (case.kind == "chat" and case.truncation_method) and not case.full_loss and not case.pad_cu_seqlens
        req = _explore_direct.direct_request(case)
        assert case.seq % _directsft.need(req.layout) == 0 and req.pipeline == case.pp
        if case.in_batch:
            assert not case.pad_to_max_length
            assert req.knobs == {"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": case.mult}
        else:
            assert req.knobs == {"pad_to_multiple_of": case.mult, "pad_to_max_length": case.pad_to_max_length}


def test_data_cases_draw_shards_and_keep_old_ids(monkeypatch):
    """The data space draws one file or 2-3 shards where MB has Parquet shards, one file where it has
    not; a case of one file keeps the spec (and id) it had before shards were drawn; shard sizes
    cover every row once."""
    from harness.suite.adapters import packed_artifact
    from suites import _shards

    monkeypatch.setattr(_shards, "available", lambda: False)
    assert {c.shards for c in _draw(_explore.cases(), 20)} == {1}
    monkeypatch.setattr(_shards, "available", lambda: True)
    drawn = _draw(_explore.cases(), 40)
    assert {c.shards for c in drawn} == {1, 2, 3}
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert ("shards" in spec) == (case.shards > 1) and _explore.from_spec(spec) == case
    for total, shards in ((1, 3), (2, 2), (7, 3), (8, 2)):
        sizes = _shards.even_sizes(total, shards)
        assert sum(sizes) == total and max(sizes) - min(sizes) <= 1
        assert packed_artifact.shard_sizes(total, sizes) == [n for n in sizes if n > 0]
    assert packed_artifact.shard_sizes(8, [2, 3]) == [2, 3, 3] and packed_artifact.shard_sizes(3, [2, 3]) == [2, 1]


def test_pretrain_cases_are_gpt_dataset_configs_with_edge_lengths():
    """A drawn pretraining case names its space, round-trips, sets each GPTDatasetConfig knob both ways
    over a few draws, and its documents have the drawn lengths: a long document is exactly
    ``long_words`` words, which are drawn around the sample's edge."""
    from suites import _explore_pretrain

    drawn = _draw(_explore_pretrain.pretrain_cases(), 40)
    for knob in ("eod_mask_loss", "reset_position_ids", "reset_attention_mask", "keep_partial_validation"):
        assert {getattr(c, knob) for c in drawn} == {True, False}, knob
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert case.axis == "pretrain" and explored.space(spec) == "pretrain" and _explore.from_spec(spec) == case
        assert case.long_words in (case.seq - 2, case.seq - 1, case.seq, 2 * case.seq - 1, 3 * case.seq)
        docs = _explore_pretrain.documents(case)
        assert len(docs) == case.n and docs == _explore_pretrain.documents(case)
        lengths = [len(d.split()) for d in docs]
        if case.long_rate == 1.0:
            assert set(lengths) == {case.long_words}
        if case.long_rate == 0.0:
            assert all(case.min_words <= n <= case.max_words for n in lengths)
        knobs = _explore_pretrain.knobs(case)
        assert knobs["drop_last_partial_validation_sequence"] is not case.keep_partial_validation
        assert case.step == "" or (case.reset_attention_mask and case.step in _explore_pretrain.step_variants())


def test_energon_cases_are_energon_loader_configs():
    """A drawn Energon case names its space and round-trips; its knobs are ``EnergonDatasetConfig``
    fields of the drawn mode (the loader's packing multiple only when it packs, a padding multiple
    and ``pad_to_max_length`` otherwise, deferral only with packing); each mode, both task encoders
    and one or two shards are drawn; lengths reach past ``seq_length`` (answers of up to 40 words);
    a spec saved before the Energon space existed keeps its id."""
    from suites import _explore_energon

    drawn = _draw(_explore_energon.energon_cases(), 40)
    modes = {(c.in_batch, c.defer) for c in drawn}
    assert modes == {(False, False), (True, False), (True, True)}
    assert {c.encoder for c in drawn} == set(_explore_energon.ENCODERS) and {c.shards for c in drawn} == {1, 2}
    assert max(c.max_words for c in drawn) > 20
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert case.axis == "energon" and explored.space(spec) == "energon" and _explore.from_spec(spec) == case
        assert case.seq in _explore_energon.ENERGON_SEQS and case.shards <= case.n
        ecase = _explore_energon.energon_case(case)
        assert (ecase.mbs, ecase.seq, ecase.n, ecase.max_answer) == (case.mbs, case.seq, case.n, case.max_words)
        assert len(ecase.samples) == case.n
        knobs = ecase.knobs
        if case.in_batch and not case.defer:
            assert knobs == {"enable_in_batch_packing": True, "in_batch_packing_pad_to_multiple_of": case.mult}
        else:
            assert knobs["pad_to_multiple_of"] == case.mult
            assert knobs.get("pad_to_max_length", False) is case.pad_to_max_length
            assert knobs.get("defer_in_batch_packing_to_step", False) is case.defer
    # a case of the data space keeps the spec (and id) it had before the Energon fields existed
    old = {"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}
    assert _explore.from_spec(old).id == "explored-99abd75737"
    assert not set(json.loads(_explore.to_spec(_explore.from_spec(old)))) & {"energon", "encoder", "defer"}


def test_mimo_cases_are_mimo_trainings_with_edge_lengths():
    """A drawn MIMO case names its space and round-trips; every module layout, MB's default encoder
    length and the edges (one text token left, none: MB must refuse) are drawn; its samples fill
    whole global batches (``n`` a multiple of ``gbs``, ``gbs`` of ``mbs``), one marked text each, of
    lengths that end one short of, at and one past the room the placeholders leave; a spec saved
    before the MIMO space existed keeps its id."""
    from suites import _explore_mimo, _mimo

    drawn = _draw(_explore_mimo.mimo_cases(), 60)
    assert {c.module_dps for c in drawn} == set(_explore_mimo.MODULE_LAYOUTS)
    assert {0, 1} <= {c.encoder_length for c in drawn}
    assert any(c.encoder_length == c.seq for c in drawn) and any(c.encoder_length == c.seq - 1 for c in drawn)
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert case.axis == "mimo" and explored.space(spec) == "mimo" and _explore.from_spec(spec) == case
        assert case.n % case.gbs == 0 and case.gbs % case.mbs == 0 and case.seq in _explore_mimo.MIMO_SEQS
        texts = _explore_mimo.texts(case)
        assert len(texts) == case.n and len(set(texts)) == case.n
        room = case.seq - (case.encoder_length or 1)
        assert case.long_words in {max(room + k, 0) for k in (-2, -1, 0)}
        assert all(t.split()[0] in _mimo.tokenizer.MARKERS for t in texts)
        assert set(_explore_mimo.modules(case).values()) <= {1, 2}
    old = {"seed": 3, "kind": "chat", "mult": 4, "seq": 32, "n": 2}
    assert _explore.from_spec(old).id == "explored-99abd75737"
    assert not set(json.loads(_explore.to_spec(_explore.from_spec(old)))) & {"mimo", "encoder_length", "module_dps"}


def _reach(rule: Rule, tied: dict[Rule, set[Rule]]) -> set[Rule]:
    out, todo = {rule}, [rule]
    while todo:
        for t in tied.get(todo.pop(), set()) - out:
            out.add(t)
            todo.append(t)
    return out


def test_config_cases_break_at_most_one_rule_in_a_drawn_context(tmp_path):
    """A drawn configuration names its space and round-trips as its config alone (and as a saved case);
    valid configs and every rule broken are drawn, each rule in more than one context (dataset, CP, packing path); a
    broken config breaks its rule alone or with those tied to it (offline with in-batch packing
    breaks a micro-batch rule too, the offline flag without specs whatever the path's micro-batch rule
    says, CUDA graphs without ``pad_to_max_length`` a ``pad_cu_seqlens`` rule); the drawn layouts are
    ones megatron-core builds (SP only with TP, whole micro-batches)."""
    from suites import _explore_config

    tied = {
        Rule.OFFLINE_IN_BATCH_EXCLUSIVE: {Rule.OFFLINE_MICRO_BATCH_1, Rule.IN_BATCH_MICRO_BATCH_OVER_1},
        Rule.OFFLINE_FLAG_NEEDS_SPECS: {Rule.OFFLINE_IN_BATCH_EXCLUSIVE, Rule.OFFLINE_MICRO_BATCH_1},
        Rule.CUDA_GRAPHS_NEED_PAD_TO_MAX: {Rule.CUDA_GRAPHS_NEED_PAD_CU_SEQLENS, Rule.PAD_CU_SEQLENS_NEEDS_PAD_TO_MAX},
    }
    drawn = _draw(_explore_config.config_cases(), 400)
    contexts: dict[Rule | None, set[tuple]] = {}
    for case in drawn:
        spec = json.loads(_explore.to_spec(case))
        assert set(spec) == {"config", "seed"} and explored.space(spec) == "config", spec
        assert case.axis == "config" and _explore.from_spec(spec) == case
        cfg = _explore_config.config_spec(case)
        assert cfg.global_batch_size % cfg.micro_batch_size == 0 and (
            cfg.tensor_parallel > 1 or not cfg.sequence_parallel
        )
        broken = _explore_config.broken_rules(cfg)
        # the rule the draw broke: one whose ties (and theirs) account for every rule broken
        meant = [r for r in _explore_config.RULES if r in broken and broken <= _reach(r, tied)]
        assert meant or not broken, broken
        first = meant[0] if meant else None
        packing = "offline" if cfg.offline_packing_size else "in_batch" if cfg.in_batch_packing else "none"
        contexts.setdefault(first, set()).add((cfg.dataset, cfg.context_parallel > 1, packing))
    assert set(contexts) == {None, *_explore_config.RULES}
    assert all(len(seen) > 1 for seen in contexts.values()), contexts
    # kept with --save, a configuration comes back as the same case, one pytest can parametrize (hashable)
    explored.save(tmp_path, json.loads(_explore.to_spec(drawn[-1])))
    (back,) = _explore.saved(tmp_path)
    assert back.config == drawn[-1].config and hash(back) == hash(dataclasses.replace(drawn[-1], id=back.id))


def test_the_rule_model_agrees_with_every_listed_rule_case():
    """The configuration space's judge (``broken_rules``) and the hand-written ``config_validation`` cases
    say the same: a valid case breaks no rule, an invalid one breaks its own rule (offline with in-batch
    packing also breaks the offline micro-batch rule, as the suite says, and only the exclusivity rule
    may refuse it)."""
    from harness.suite.adapters.config import PackingConfigSpec as Spec
    from suites import _explore_config
    from suites.test_config_validation import CASES

    for name, spec, rule, _ in CASES:
        broken = _explore_config.broken_rules(spec)
        if rule is None:
            assert not broken, (name, broken)
        else:  # and the space takes the listed rule's refusal, the only one the suite takes
            assert rule in broken and len(broken) <= 2, (name, broken)
            assert rule in _explore_config.may_refuse(broken), (name, broken)
    both = _explore_config.broken_rules(Spec(offline_packing_size=512, in_batch_packing=True, micro_batch_size=4))
    assert _explore_config.may_refuse(both) == {Rule.OFFLINE_IN_BATCH_EXCLUSIVE}, both


def test_a_known_bug_does_not_end_the_search(monkeypatch):
    """Exploration sets aside a drawn case that fails only by a known MB bug and keeps drawing: a
    new failure later in the budget is still found (naming the known bugs met); with none, the
    first known failure is the verdict."""
    from suites import test_explore as space

    class Known(AssertionError):
        pass

    class New(AssertionError):
        pass

    def check(case):
        if case.n == 1:
            raise Known("known crash")
        if case.n >= 15:
            raise New("a new bug")

    monkeypatch.setattr(space, "_replayable", check)
    monkeypatch.delenv("HARNESS_EXPLORE_REPLAY", raising=False)
    monkeypatch.setenv("HARNESS_EXPLORE_BUDGET", "40")

    def known_bug(exc):
        return ("known-crash",) if isinstance(exc, Known) else ()

    with pytest.raises(New) as new:
        space._explore_space(_explore.cases(), 4, known_bug)
    assert any("known MB bug(s) known-crash" in note for note in getattr(new.value, "__notes__", []))

    monkeypatch.setattr(space, "_replayable", lambda case: (_ for _ in ()).throw(Known("known crash")))
    with pytest.raises(Known) as only_known:
        space._explore_space(_explore.cases(), 4, known_bug)
    assert any("drawn case(s) (40 asked)" in note for note in only_known.value.__notes__)


def _cli(*argv: str, cwd) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_")}
    return subprocess.run(
        [sys.executable, "-m", "harness", *argv], cwd=cwd, capture_output=True, text=True, timeout=900, env=clean
    )


@pytest.mark.slow
def test_exploration_finds_a_real_mb_bug_shrinks_replays_and_saves(tmp_path):
    from harness import paths

    fixtures = tmp_path / "fixtures"
    shutil.copytree(paths.fixtures_dir(), fixtures)
    kept_before = set((fixtures / "explored").glob("explored-*.json"))
    found = _cli(
        "explore",
        "--space",
        "data",
        "--eos",
        "--budget",
        "20",
        "--seed",
        "0",
        "--fixtures",
        str(fixtures),
        "-q",
        cwd=tmp_path,
    )
    assert found.returncode == 1, found.stdout + found.stderr
    replay = re.search(r"replay: harness explore --replay '([^']*)'", found.stdout)
    assert replay, found.stdout
    spec = explored.parse(replay.group(1))
    assert spec["eos"] is True and spec["n"] <= 3, spec  # shrunk: a handful of examples at most
    assert "loss-mask-equals-unpacked" in found.stdout
    reproduce = re.search(r"reproduce: (harness explore .*)", found.stdout)
    assert reproduce, found.stdout
    again = _cli(*shlex.split(reproduce.group(1))[1:], "--save", cwd=tmp_path)
    assert again.returncode == 1 and "loss-mask-equals-unpacked" in again.stdout, again.stdout + again.stderr
    saved = sorted(set((fixtures / "explored").glob("explored-*.json")) - kept_before)
    assert [json.loads(p.read_text())["spec"] for p in saved] == [spec]
    run = _cli("run", "--suite", "explore", "--fixtures", str(fixtures), "-q", cwd=tmp_path)
    assert f"explore::test_saved_explored_case[{saved[0].stem}]" in run.stdout, run.stdout


def _shrunk_on_fault(
    tmp_path, monkeypatch, fault_id: str, test: str, says: str, seed: int = 0, budget: int = 12
) -> dict:
    """Run exploration test ``test`` (``budget`` examples, ``seed``) on a copy of MB with catalogue fault
    ``fault_id``: it must fail saying ``says``; returns the spec of the shrunk example it replays."""
    from harness.commands import mutate
    from harness.mutations import installed_package_dir, load_catalogue
    from harness.records.verdict import Verdict

    fault = {f.id: f for f in load_catalogue()}[fault_id]
    monkeypatch.setenv("HARNESS_EXPLORE_BUDGET", str(budget))
    monkeypatch.setenv("HARNESS_EXPLORE_SEED", str(seed))
    result = mutate.run_copy(
        fault, tmp_path / "run", ["explore"], timeout=900, pkg=installed_package_dir(), keyword=test
    )
    assert result is not None
    (case,) = result.cases
    assert case.verdict is Verdict.FAIL and says in case.message, case.message
    replay = re.search(r"replay: harness explore --replay '([^']*)'", case.message)
    assert replay, case.message
    return explored.parse(replay.group(1))


@pytest.mark.slow
def test_layout_exploration_finds_a_layout_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the layouts space: on a copy of MB whose ``get_batch`` hands a middle
    pipeline stage no packed boundaries (catalogue fault ``pp_middle_stage_no_boundaries``), a
    nightly-sized exploration (12 examples) turns red by the PP invariant and shrinks to a
    one-example PP case. Seed 1: its 12 draws hold PP cases (seed 0's hold none since the CP axis
    draws a DP x CP world too; a new draw changes which cases a seed draws)."""
    spec = _shrunk_on_fault(
        tmp_path,
        monkeypatch,
        "pp_middle_stage_no_boundaries",
        "test_explore_layouts",
        "pp-stage-gets-what-it-needs",
        seed=1,
    )
    assert spec.get("pp", 1) > 1 and spec["n"] == 1 and explored.space(spec) == "layouts", spec


@pytest.mark.slow
def test_layout_exploration_draws_the_loaders_drop_last(tmp_path, monkeypatch):
    """Negative control of the DP x CP world's drawn ``drop_last``: on a copy of MB whose loader keeps
    the incomplete last global batch without padding it (catalogue fault
    ``loader_keep_last_without_padding``), 12 examples turn red (a rank of the world gets no row and
    MB's collate raises) and shrink to a DP x CP case with ``drop_last`` off, its replay kept. Seed
    7: its eighth draw is such a world."""
    spec = _shrunk_on_fault(
        tmp_path, monkeypatch, "loader_keep_last_without_padding", "test_explore_layouts", "DP2", seed=7
    )
    assert spec["keep_last"] and spec["dp"] == 2 and spec["cp"] == 2 and explored.space(spec) == "layouts", spec


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault_id,says,shape",
    [
        ("direct_sft_in_batch_multiple_not_forwarded", "alignment", {"in_batch": True}),
        ("sp_multiple_dropped", "CP/SP split (1, 2, True) needs a multiple of 2", {"tp": 2, "sp": True}),
    ],
)
def test_direct_exploration_finds_a_collate_fault_and_shrinks_it(tmp_path, monkeypatch, fault_id, says, shape):
    """Negative controls of the direct space: on a copy of MB whose direct SFT dataset does not hand
    its collate the in-batch multiple, or whose config finalisation drops sequence parallelism's
    term of the multiple (the hand-written layouts catch it; the layouts space did not in 12
    examples), 12 drawn examples (seed 0) turn red and shrink to a one-example case of the path the
    fault breaks: in-batch packing, or rows padded for TP 2 with SP."""
    spec = _shrunk_on_fault(tmp_path, monkeypatch, fault_id, "test_explore_direct_sft", says)
    assert spec["direct"] and spec["n"] == 1 and explored.space(spec) == "direct", spec
    assert {k: spec.get(k) for k in shape} == shape, spec


@pytest.mark.slow
def test_direct_exploration_draws_pipeline_stages(tmp_path, monkeypatch):
    """Negative control of the direct space's drawn pipeline stages: on a copy of MB whose config
    validation no longer forces ``pad_to_max_length`` for PP (catalogue fault
    ``pp_fixed_width_dropped``), 12 examples turn red (rows narrower than ``seq_length`` where
    stages exchange one shape) and shrink to a one-example PP 2 case. Seed 2: its 12 draws hold a
    PP 2 case (seeds 0, 1, 3 and 4 do not; seed 0 finds it within 40)."""
    spec = _shrunk_on_fault(
        tmp_path, monkeypatch, "pp_fixed_width_dropped", "test_explore_direct_sft", "PP 2: pad_to_max_length", seed=2
    )
    assert spec["direct"] and spec.get("pp") == 2 and spec["n"] == 1 and explored.space(spec) == "direct", spec


@pytest.mark.slow
def test_data_exploration_finds_a_shard_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the data space's shard draw: on a copy of MB whose packed Parquet dataset
    serves the next shard's first row group from the previous shard's cache (catalogue fault
    ``parquet_row_group_cache_ignores_the_file``), 12 drawn examples (seed 0) turn red and shrink to
    a few examples in two shards and none of the dataset-life dimensions (drawn after the shards
    since issue 48, they leave Hypothesis's shrinker at four examples where it reached three)."""
    spec = _shrunk_on_fault(
        tmp_path,
        monkeypatch,
        "parquet_row_group_cache_ignores_the_file",
        "test_explore_offline_packing",
        "not each row once",
    )
    assert spec["shards"] == 2 and spec["n"] <= 4 and explored.space(spec) == "data", json.dumps(spec)
    assert not spec.get("reprepared") and not spec.get("validation"), json.dumps(spec)


@pytest.mark.slow
def test_data_exploration_finds_a_cap_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the data space's length caps: on a copy of MB whose packing preparation
    ignores ``max_single_sequence_length`` (catalogue fault ``max_single_ignored_in_preparation``:
    an example past one example's cap trains whole), 12 drawn examples (seed 0) turn red and shrink
    to one example under a drawn cap below the pack size."""
    spec = _shrunk_on_fault(
        tmp_path, monkeypatch, "max_single_ignored_in_preparation", "test_explore_offline_packing", "packed !="
    )
    assert spec.get("max_single") and spec["max_single"] < spec["seq"] and spec["n"] == 1, json.dumps(spec)
    assert explored.space(spec) == "data", json.dumps(spec)


@pytest.mark.slow
def test_pretrain_exploration_finds_a_dataset_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the pretraining space: on a copy of MB whose megatron-core GPTDataset lets a
    token attend to the previous document under ``reset_attention_mask`` (catalogue fault
    ``gpt_dataset_reset_attention_keeps_previous_document``), 12 drawn examples (seed 0) turn red
    and shrink to the fewest documents the space draws, one word each."""
    spec = _shrunk_on_fault(
        tmp_path,
        monkeypatch,
        "gpt_dataset_reset_attention_keeps_previous_document",
        "test_explore_pretraining",
        "may attend",
    )
    assert spec["reset_attention_mask"] and spec["n"] == 5 and spec["max_words"] == 1, spec
    assert explored.space(spec) == "pretrain", spec


@pytest.mark.slow
def test_energon_exploration_finds_a_loader_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the Energon space: on a copy of MB whose Energon builder hands the task
    encoder multiple 1 whatever ``in_batch_packing_pad_to_multiple_of`` says (catalogue fault
    ``energon_in_batch_multiple_not_forwarded``), 12 drawn examples (seed 0) turn red by the
    alignment invariant and shrink to a one-sample loader that packs on a multiple over 1."""
    spec = _shrunk_on_fault(
        tmp_path, monkeypatch, "energon_in_batch_multiple_not_forwarded", "test_explore_energon", "alignment"
    )
    assert spec["energon"] and spec["in_batch"] and spec["mult"] > 1 and spec["n"] == 1, spec
    assert explored.space(spec) == "energon", spec


@pytest.mark.slow
def test_mimo_exploration_finds_a_step_fault_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the MIMO space: on a copy of MB whose MIMO forward step hands a module's
    data-parallel ranks their slices of the global micro-batch in reverse (catalogue fault
    ``mimo_dp_slice_reversed``: each sample still trains once, but the communicator routes the
    encoder's rows by rank order, so a text gets another sample's image), 12 drawn examples (seed 0)
    turn red and shrink to the smallest world that shows it: the language module on 2 ranks, one
    micro-batch of 2."""
    spec = _shrunk_on_fault(
        tmp_path, monkeypatch, "mimo_dp_slice_reversed", "test_explore_mimo", "gets the image embeddings of sample"
    )
    assert spec["mimo"] and spec["module_dps"] == "1-2" and spec["mbs"] == 2 and spec["n"] == 2, spec
    assert explored.space(spec) == "mimo", spec


@pytest.mark.slow
def test_config_exploration_finds_a_rule_lost_in_a_context_and_shrinks_it(tmp_path, monkeypatch):
    """Negative control of the configuration space: on a copy of MB whose ``validate()`` waives per-token
    loss under CP > 1 when packing offline (catalogue fault ``cp_per_token_loss_waived_for_offline_packing``;
    the ``config_validation`` case of the rule has no packing and stays green), the space's default
    budget (seed 0) turns red and shrinks to CP 2 with offline packing and no per-token loss."""
    from suites.test_explore import DEFAULT_CONFIG_BUDGET

    spec = _shrunk_on_fault(
        tmp_path,
        monkeypatch,
        "cp_per_token_loss_waived_for_offline_packing",
        "test_explore_config",
        "breaks cp-finetune-per-token-loss and was accepted",
        budget=DEFAULT_CONFIG_BUDGET,
    )
    config = spec["config"]
    assert config["context_parallel"] == 2 and config["per_token_loss"] is False, spec
    assert config.get("offline_packing_size") and explored.space(spec) == "config", spec


@pytest.mark.slow
def test_a_saved_explored_case_bisects_like_any_other(tmp_path):
    """``harness bisect`` names the commit that broke a saved explored case: a history of MB whose
    first commit carries the fix of the full-loss padding row bug (the catalogue's fix mutant) and
    whose third drops it again; the saved DP case that exploration found is selected by ``-k``."""
    from gitrepos import GIT_ENV, commit_all, git, installed

    from harness.mutations import load_catalogue

    saved = "explored-c8b9718e29"
    assert (Path(__file__).parents[1] / "fixtures" / "explored" / f"{saved}.json").is_file()
    fix = {f.id: f for f in load_catalogue()}["fix_full_loss_padding_row_untrained"]
    mb = installed("megatron.bridge")
    repo = tmp_path / "Megatron-Bridge"
    pkg = repo / "src" / "megatron" / "bridge"
    shutil.copytree(mb, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    assert fix.apply(pkg)
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    shas = [commit_all(repo, "Import Megatron-Bridge with padding rows masked under the full loss", 0)]
    (repo / "CHANGELOG.md").write_text("notes\n")
    shas.append(commit_all(repo, "Bump changelog", 1))
    for e in fix.edits:  # the regression: the packed datasets lose the padding flag again
        shutil.copy2(mb / e.file, pkg / e.file)
    shas.append(commit_all(repo, "Simplify the packed datasets' loss mask", 2))
    (repo / "CHANGELOG.md").write_text("notes, again\n")
    shas.append(commit_all(repo, "Bump changelog (2)", 3))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "harness", "bisect", f"{shas[0]}..{shas[-1]}", "--repo", str(repo)]
    cmd += ["--suite", "explore", "-k", f"test_saved_explored_layout_case and {saved.split('-')[1]}"]
    cmd += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out), "-q"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **GIT_ENV}, timeout=1500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "bisect.json").read_text())
    found = {c["case_id"]: (c["culprit"] or {}).get("sha") for c in doc["cases"]}
    assert found == {f"explore::test_saved_explored_layout_case[{saved}]": shas[2]}, found


def test_bad_explore_input_is_a_one_line_usage_error(tmp_path):
    for argv in (("explore", "--budget", "0"), ("explore", "--replay", "{not json"), ("explore", "--save")):
        proc = _cli(*argv, cwd=tmp_path)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert proc.stderr.strip().count("\n") == 0, proc.stderr
