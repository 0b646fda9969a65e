"""`inhabit midtrain` on a tiny model and a tiny corpus written here: learning, held-out perplexity,
a servable result, exact resume, a corpus built from sources, and bad input as one error line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from inhabit.cli import main
from inhabit.observability.metrics import read_metrics
from inhabit.trainer.corpus import CorpusSpec, build_corpus

TIMING = {"tokens_per_s", "step_s"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path_factory, monkeypatch):
    """The default tokenizer is trained once into a temp cache, never into the user's."""
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "inhabit-cache"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A package of 60 small Python modules (the project's synthetic code generator, seeded)."""
    from inhabit.models.corpus import python_snippet

    root = tmp_path_factory.mktemp("src")
    rng = random.Random(0)
    for i in range(60):
        (root / f"mod{i:02d}.py").write_text(python_snippet(rng))
    return root


@pytest.fixture(scope="module")
def corpus(sources, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corpus") / "c"
    build_corpus([sources], out, CorpusSpec(held_out=0.2))
    return out


def write_config(path: Path, run_dir: Path, corpus_line: str, **top: object) -> Path:
    settings = {
        "steps": 20, "batch_size": 4, "seq_len": 32, "eval_every": 10, "eval_sequences": 4,
        "checkpoint_every": 0, "run_dir": str(run_dir), "threads": 1, **top,
    }  # fmt: skip
    text = "".join(f"{k} = {json.dumps(v)}\n" for k, v in settings.items())
    text += (
        "[model]\n"
        "spec = { hidden_size = 32, num_layers = 1, num_heads = 2, num_kv_heads = 1, intermediate_size = 64,"
        " max_position_embeddings = 64 }\n"
        f"[corpus]\n{corpus_line}\n"
        '[trainer]\nlr = 1e-2\nschedule = "cosine"\nwarmup_steps = 2\ntotal_steps = 20\n'
        '[metrics]\ntensorboard = false\nprogress = "off"\n'
    )
    path.write_text(text)
    return path


def cli(capsys, *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(["--log-level", "WARNING", *args])
    out = capsys.readouterr()
    return int(e.value.code or 0), out.out, out.err


def test_midtrain_learns_logs_held_out_perplexity_and_writes_a_servable_model(tmp_path, corpus, capsys):
    from inhabit.models.loading import check_model_folder, load_model

    run = tmp_path / "run"
    cfg = write_config(tmp_path / "m.toml", run, f'path = "{corpus}"')
    code, out, err = cli(capsys, "midtrain", str(cfg))
    assert code == 0, err
    assert "held-out perplexity:" in out and "before ->" in out
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == list(range(21))
    evals = {r["step"]: r["held_out_ppl"] for r in records if "held_out_ppl" in r}
    assert sorted(evals) == [0, 10, 20]
    nll = [r["train_nll"] for r in records[1:]]
    assert sum(nll[-5:]) / 5 < sum(nll[:5]) / 5 - 1.0  # next-token loss falls on the train split
    assert evals[20] < evals[0] / 4  # and on held-out files it never saw
    summary = json.loads((run / "summary.json").read_text())
    assert summary["held_out_ppl_before"] == evals[0] and summary["held_out_ppl_after"] == evals[20]
    check_model_folder(run / "model")  # what `inhabit train` checks of a model.path folder
    model, tok = load_model(run / "model")  # servable: weights, config and tokenizer
    assert tok.chat_template and model.config.vocab_size >= len(tok)
    state = json.loads((run / "checkpoints" / "v000020" / "trainer_state.json").read_text())
    assert state["steps"] == 20 and set(state["data_state"]) == {"epoch", "doc", "offset"}


def test_resume_gives_the_losses_of_an_uninterrupted_run(tmp_path, corpus, capsys):
    line = f'path = "{corpus}"'
    straight = tmp_path / "straight"
    cfg = write_config(tmp_path / "a.toml", straight, line, steps=6, eval_every=3)
    assert cli(capsys, "midtrain", str(cfg))[0] == 0

    stopped = tmp_path / "stopped"
    first = write_config(tmp_path / "b.toml", stopped, line, steps=3, eval_every=3, checkpoint_every=2)
    assert cli(capsys, "midtrain", str(first))[0] == 0
    # as if it had stopped after step 3 with only the step-2 checkpoint on disk: step 3 is done again
    shutil.rmtree(stopped / "checkpoints" / "v000003")
    rest = write_config(tmp_path / "c.toml", stopped, line, steps=6, eval_every=3, checkpoint_every=2)
    code, _, err = cli(capsys, "midtrain", str(rest), "--resume")
    assert code == 0, err

    def figures(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in read_metrics(run / "metrics.jsonl")]

    assert figures(stopped) == figures(straight)  # bit for bit: floats compared exactly
    assert len(figures(straight)) == 7
    for name in ("model.safetensors",):
        assert (stopped / "model" / name).read_bytes() == (straight / "model" / name).read_bytes()


def test_sources_build_the_corpus_into_the_run_and_a_second_run_reuses_it(tmp_path, sources, capsys):
    run = tmp_path / "run"
    cfg = write_config(
        tmp_path / "s.toml", run, f"sources = [{json.dumps(str(sources))}]\nheld_out = 0.2", steps=1
    )
    code, out, err = cli(capsys, "midtrain", str(cfg), "metrics.progress=plain")
    assert code == 0, err
    manifest = json.loads((run / "corpus" / "manifest.json").read_text())
    assert manifest["counts"]["train"]["files"] + manifest["counts"]["held_out"]["files"] == 60
    assert "corpus: building" in out
    code, out, err = cli(capsys, "midtrain", str(cfg), "metrics.progress=plain")
    assert code == 0 and "corpus: reusing" in out, err


def test_site_packages_names_the_installed_packages():
    from inhabit.orchestrator.midtrain.run import resolve_sources

    folders = resolve_sources(["@site-packages"])
    assert folders and any((f / "typer" / "__init__.py").is_file() for f in folders)


def test_bad_input_is_one_line(tmp_path, corpus, sources, capsys):
    run = tmp_path / "run"
    code, out, err = cli(capsys, "midtrain", str(tmp_path / "missing.toml"))
    assert code == 2 and len(err.splitlines()) == 1 and "does not exist" in err
    cfg = write_config(tmp_path / "m.toml", run, f'path = "{sources}"')
    code, out, err = cli(capsys, "midtrain", str(cfg))
    assert code == 2 and len(err.splitlines()) == 1 and "is not a corpus" in err
    cfg = write_config(tmp_path / "m.toml", run, f'path = "{corpus}"')
    code, out, err = cli(capsys, "midtrain", str(cfg), "--resume")
    assert code == 2 and len(err.splitlines()) == 1 and "no checkpoint" in err
    code, out, err = cli(capsys, "midtrain", str(cfg), "seq_len=4096")
    assert code == 2 and len(err.splitlines()) == 1 and "exceeds the model's 64 positions" in err
    code, out, err = cli(capsys, "midtrain", str(cfg), f'corpus.sources=["{sources}"]')
    assert code == 2 and out == "" and "exactly one of corpus.path" in err


def test_the_shipped_config_trains_the_quickstart_model_on_the_venv():
    from inhabit.config import load_config
    from inhabit.orchestrator.config import RunConfig
    from inhabit.orchestrator.midtrain.config import MidtrainConfig

    configs = Path(__file__).resolve().parents[3] / "configs"
    cfg = load_config(MidtrainConfig, configs / "midtrain.toml")
    quick = load_config(RunConfig, configs / "quickstart.toml")
    assert cfg.model.spec == quick.model.spec and cfg.model.tokenizer == quick.model.tokenizer
    assert cfg.corpus.sources == ["@site-packages"] and cfg.corpus.suffixes == (".py",)
    assert cfg.trainer.total_steps == cfg.steps  # the cosine ends with the run
