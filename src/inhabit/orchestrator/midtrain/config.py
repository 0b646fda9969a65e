"""`MidtrainConfig`: everything `inhabit midtrain CONFIG [overrides...]` needs, one TOML file.

    [model]      the starting weights, as in `inhabit train`: a Hugging Face folder (`path`) or a
                 tiny model built from a preset/spec with its tokenizer (no bootstrap here)
    [corpus]     a built corpus folder (`path`, from `inhabit corpus build`), or `sources` to build
                 one into `<run_dir>/corpus` (kept and reused while its settings stay the same)
    [trainer]    inhabit.trainer.TrainerConfig: lr, warm-up, schedule (cosine needs total_steps)
    [metrics]    TensorBoard / W&B / terminal display, as in `inhabit train`

and at the top level: `steps`, `batch_size`, `seq_len`, `eval_every`, `eval_sequences`,
`checkpoint_every`, `seed`, `run_dir`, `threads`.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.orchestrator.config import MetricsConfig, ModelConfig
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.corpus import CorpusSpec

SITE_PACKAGES = "@site-packages"
"""A `corpus.sources` entry that names the site-packages folders of the Python running inhabit."""


class MidtrainCorpusConfig(CorpusSpec):
    """The text trained on: a built corpus, or the folders to build one from (the spec's settings)."""

    path: str | None = Field(None, description="A corpus folder made by `inhabit corpus build`.")
    sources: list[str] = Field(
        default_factory=list,
        description=f"Folders to build a corpus from into <run_dir>/corpus; {SITE_PACKAGES!r} names the "
        "site-packages of the Python running inhabit (its installed packages).",
    )

    @model_validator(mode="after")
    def _one_source(self) -> MidtrainCorpusConfig:
        if (self.path is None) == (not self.sources):
            raise ValueError("set exactly one of corpus.path (a built corpus) and corpus.sources (folders)")
        return self


class MidtrainConfig(Config):
    """A whole midtraining run (see module docstring)."""

    model: ModelConfig
    corpus: MidtrainCorpusConfig
    trainer: TrainerConfig = Field(default_factory=lambda: TrainerConfig(lr=1e-3))
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    steps: int = Field(100, ge=1, description="Optimizer steps.")
    batch_size: int = Field(16, ge=1, description="Sequences per step.")
    seq_len: int = Field(
        512, ge=2, description="Tokens per sequence (documents packed, end of text between)."
    )
    eval_every: int = Field(
        50, ge=1, description="Held-out perplexity every N steps (also before the first and after the last)."
    )
    eval_sequences: int = Field(
        32,
        ge=1,
        description="Held-out sequences of seq_len tokens measured at each evaluation (a fixed set).",
    )
    checkpoint_every: int = Field(
        0, ge=0, description="Save a checkpoint every N steps (0: only at the end)."
    )
    seed: int = Field(
        0, ge=0, description="Order of the train documents (another per epoch) and of the held-out set."
    )
    run_dir: str = Field("runs/midtrain", description="Run folder: metrics, checkpoints, the final model.")
    threads: int | None = Field(None, ge=1, description="torch threads (None: torch's default).")

    @model_validator(mode="after")
    def _check(self) -> MidtrainConfig:
        if self.model.bootstrap.steps:
            raise ValueError("model.bootstrap is for `inhabit train`; midtraining starts from the init")
        if self.model.chat_template is not None:
            raise ValueError(
                "model.chat_template: midtraining trains on plain text; give the template to the "
                "`inhabit train` run that starts from the result"
            )
        if self.trainer.data_parallel > 1:
            raise ValueError("trainer.data_parallel > 1: midtraining runs one trainer process")
        return self
