"""`RunConfig`: everything `inhabit train CONFIG [overrides...]` needs, one TOML file.

    [model]      where the policy comes from: a Hugging Face folder, or a tiny model built from a
                 preset/spec (optionally bootstrapped on the quickstart's expert transcripts)
    [tasks]      task directories (a folder of them) or the quickstart's generated family
    [trainer]    inhabit.trainer.TrainerConfig      [harness]  inhabit.harness.HarnessConfig
    [sandbox]    inhabit.sandbox.SandboxConfig      [engine]   backend (ENGINE_BACKENDS),
                                                               replicas, and the embedded engine's settings
    [weights]    a store every version is also published to (optional)
    [rollout]    G per task, tasks per step, concurrency, sampling
    [eval]       held-out evaluation before and after training
    [metrics]    where step metrics go (metrics.jsonl always; TensorBoard, W&B)
    [reward]     composed rewards: tests, lint delta, diff size, LLM judges (optional; see
                 RunRewardConfig)

and at the top level: `mode` ("async" or "sync"), `max_staleness`, `stale_policy`, `partial_age`, `steps`, `seed`, `run_dir`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from inhabit.config import Config
from inhabit.harness.config import HarnessConfig
from inhabit.models.tiny import TinyModelSpec
from inhabit.placement.config import PlacementConfig
from inhabit.placement.engine_backends import RunEngineConfig
from inhabit.rewards.compose import RewardConfig
from inhabit.rollouts import RolloutConfig
from inhabit.sandbox import SandboxConfig
from inhabit.trainer.config import TrainerConfig


class BootstrapConfig(Config):
    """Next-token training on the scripted expert's transcripts (the generated families only:
    tasks.source quickstart or multistep)."""

    steps: int = Field(0, ge=0, description="Optimizer steps; 0 = no bootstrap (start from the init).")
    batch_size: int = Field(8, ge=1, description="Transcripts per step.")
    lr: float = Field(3e-3, gt=0, le=1, description="Peak AdamW learning rate (warm-up, cosine to 10%).")
    careless: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of train tasks that also get a careless expert transcript (an edit guessed "
        "without reading the module, which mostly fails); 1.0: every task has both habits.",
    )
    share: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Share of the train split the expert plays (the first tasks of it): with less than "
        "1, RL also trains on tasks whose transcripts the bootstrap never saw.",
    )
    fresh_names: float = Field(
        0.0,
        ge=0,
        le=8,
        description="Multistep only: extra expert transcripts on the train domains under made-up "
        "package, module and function names, as a multiple of the tasks the expert plays (1.0: as many "
        "again). They are part of neither split; they teach the model to copy the names it is shown "
        "instead of recalling the train split's few package names.",
    )
    rename: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Multistep only: share of the bootstrap's drawn examples whose package, module and "
        "function names are replaced, consistently through the transcript, by made-up ones drawn afresh "
        "at every draw (no extra episodes: the names cannot be memorized, only copied from the context).",
    )
    copy_drill: int = Field(
        0,
        ge=0,
        description="Steps of a copy drill before the bootstrap (rows of a random pattern of word pieces "
        "repeated, loss on the repeats: the induction circuit that copies names out of the context). "
        "0: none. On the quickstart's model shape the circuit appears after ~3,000 steps and not before.",
    )
    drill_mix: int = Field(
        0,
        ge=0,
        le=64,
        description="Copy-drill rows (128 tokens each) added to every bootstrap step's batch, their loss "
        "added to the transcripts': keeps the drill's copying trained while the bootstrap teaches the "
        "call format. 0: none.",
    )
    grep: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Multistep only: share of expert episodes that grep for the buggy helper's `def` "
        "line after reading the facade and then read the path grep printed (a long module whose bug "
        "lies within 40 lines of that line: those lines, in one read), so that the module's path is "
        "copied out of one observation instead of composed from the facade's import and call. 0: never.",
    )
    from_path: bool = Field(
        False,
        description="With model.path: bootstrap that folder (true: a start such as an `inhabit midtrain` "
        "model), or take it as the policy as it is (false: a folder already bootstrapped or trained, "
        "so the bootstrap settings are ignored).",
    )


class ModelConfig(Config):
    """The policy's starting weights."""

    path: str | None = Field(
        None,
        description="A Hugging Face model folder, the policy as it is; None: build a tiny model. With "
        "bootstrap.from_path (and bootstrap.steps > 0, a generated family) the folder is the start of "
        "the bootstrap instead.",
    )
    preset: str | None = Field(None, description="Tiny-model preset (inhabit.models.tiny.PRESETS).")
    spec: TinyModelSpec | None = Field(None, description="Tiny-model shape (when no preset/path).")
    tokenizer: Literal["default", "quickstart", "quickstart-native"] = Field(
        "default",
        description="Tokenizer of a built model: the default BPE, or the quickstart's (the default plus "
        "the harness system prompt as one added token), or the native quickstart's (the default with a "
        "chat template that renders `tools` in the style of Qwen3's, plus its system turn, tools "
        'included, as one added token; for harness.tool_format = "native").',
    )
    chat_template: str | None = Field(
        None,
        description="A Jinja chat template file for a model.path folder: required when the folder has "
        "none (a base model), and used instead of the folder's own when set.",
    )
    init_seed: int = Field(0, ge=0, description="Seed of the random init of a built model.")
    bootstrap: BootstrapConfig = Field(default_factory=BootstrapConfig)

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if sum(x is not None for x in (self.path, self.preset, self.spec)) != 1:
            raise ValueError("set exactly one of model.path, model.preset, model.spec")
        if self.chat_template is not None and self.path is None:
            raise ValueError("model.chat_template is for a model.path folder (a built model has its own)")
        if self.bootstrap.from_path and self.path is None:
            raise ValueError("model.bootstrap.from_path is for a model.path folder (set model.path)")
        return self

    @property
    def bootstraps(self) -> bool:
        """Whether the run bootstraps: steps > 0, from a built model or from a path that asks for it."""
        return self.bootstrap.steps > 0 and (self.path is None or self.bootstrap.from_path)


class TasksConfig(Config):
    """Where tasks come from."""

    source: Literal["dir", "quickstart", "multistep"] = Field(
        "dir",
        description="dir: task directories under `dir`; quickstart: the generated one-bug module family; "
        "multistep: the generated family of a bug hidden in a small package (held-out: other packages).",
    )
    dir: str | None = Field(None, description="Folder whose subfolders are task directories (format 1).")
    held_out_dir: str | None = Field(None, description="Folder of held-out task directories (source=dir).")
    count: int = Field(400, ge=2, description="Generated families: tasks to generate (train + held-out).")
    held_out: int = Field(64, ge=0, description="Generated families: of those, held out for evaluation.")
    seed: int = Field(0, ge=0, description="Generated families: generator seed.")
    long_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="Multistep: share of long variants (whose modules overflow the context).",
    )

    @model_validator(mode="after")
    def _check(self) -> TasksConfig:
        if self.source == "dir" and not self.dir:
            raise ValueError("tasks.source='dir' needs tasks.dir (a folder of task directories)")
        if self.source != "dir" and self.held_out >= self.count:
            raise ValueError("tasks.held_out must be smaller than tasks.count")
        return self


class EvalConfig(Config):
    """Held-out evaluation (success rate = mean reward over every held-out task x samples)."""

    before: bool = Field(True, description="Evaluate the starting model before training.")
    after: bool = Field(True, description="Evaluate the final model after training.")
    samples: int = Field(8, ge=1, description="Samples per held-out task.")
    max_tasks: int | None = Field(None, ge=1, description="Evaluate at most this many held-out tasks.")


class MetricsConfig(Config):
    """Where step metrics go (metrics.jsonl in the run folder always)."""

    tensorboard: bool = Field(True, description="Also write TensorBoard events (run_dir/tensorboard).")
    wandb: bool = Field(False, description="Also log to Weights & Biases (when wandb is importable).")
    wandb_project: str = Field("inhabit", description="W&B project.")
    progress: Literal["auto", "rich", "plain", "off"] = Field(
        "auto", description="Terminal display: rich when stdout is a TTY (auto), plain lines, or nothing."
    )


class RunWeightsConfig(Config):
    """Where a local run also publishes every version (the Ray placement always does)."""

    store: str | None = Field(
        None,
        description="A weight store (a directory or an fsspec URL): each version is published there as "
        "a full snapshot or a lossless delta, so engines elsewhere can follow the run "
        "(`inhabit weights serve`, `inhabit serve --follow`). None: versions stay in memory.",
    )


class RunRewardConfig(RewardConfig):
    """The `[reward]` table: the rollouts' reward composed from parts (`inhabit.rewards.compose`:
    tests, lint delta, diff size, LLM judges through any OpenAI-compatible endpoint). Without the
    table a rollout's reward is grading's test reward alone. In training `gate_on_tests` defaults
    to true: the other parts then only rank correct fixes, so a policy cannot earn reward by
    changing nothing (a perfect diff part) or by linting code it did not fix. A rollout with a
    fatal hack flag earns 0 whatever the gate."""

    gate_on_tests: bool = Field(
        True, description="Reward 0 unless every required test passed (the other parts rank correct fixes)."
    )


class RunConfig(Config):
    """A whole training run (see module docstring)."""

    model: ModelConfig
    tasks: TasksConfig
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    harness: HarnessConfig = Field(default_factory=HarnessConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    engine: RunEngineConfig = Field(default_factory=RunEngineConfig)
    weights: RunWeightsConfig = Field(default_factory=RunWeightsConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    reward: RunRewardConfig | None = Field(
        None, description="Composed rewards (the [reward] table); None: grading's test reward alone."
    )
    mode: Literal["async", "sync"] = Field(
        "async", description="async: rollouts and training overlap; sync: generate, then train, in turn."
    )
    max_staleness: int = Field(
        2, ge=0, description="Hard bound: no token generated more than this many versions ago is trained."
    )
    stale_policy: Literal["drop", "inflight", "partial"] = Field(
        "inflight",
        description="What the staleness bound costs a slow rollout. drop: a group holding a token older "
        "than the bound is dropped whole and its task generated again; inflight: the group trains, "
        "minus the tokens older than the bound (the bound holds per token; rollouts in progress go on "
        "with each new version the engine swaps in); partial: inflight, and a rollout `partial_age` "
        "versions old pauses between two turns until its engine holds the newest weights.",
    )
    partial_age: int = Field(
        1, ge=1, description='stale_policy = "partial": the age (versions) at which a rollout pauses.'
    )
    steps: int = Field(10, ge=0, description="Trainer steps (policy versions) to run.")
    seed: int = Field(0, ge=0, description="Seeds sampling, task order and the trainer.")
    run_dir: str = Field("runs/default", description="Run folder: trajectories, metrics, checkpoints.")
    checkpoint_every: int = Field(
        0, ge=0, description="Save a checkpoint every N steps (0: only at the end)."
    )
    threads: int | None = Field(
        None, ge=1, description="torch threads of this process (None: torch's default)."
    )

    @field_validator("placement", mode="before")
    @classmethod
    def _placement_shorthand(cls, v: object) -> object:
        return {"backend": v} if isinstance(v, str) else v  # placement = "ray"

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        if self.placement.backend == "ray" and self.engine.backend != "embedded":
            raise ValueError(
                f"engine.backend = {self.engine.backend!r} runs with placement 'local'; the Ray placement "
                "starts its own embedded engine actors"
            )
        if self.rollout.min_group_size > self.rollout.group_size:
            raise ValueError("rollout.min_group_size cannot exceed rollout.group_size")
        if self.trainer.temperature != self.rollout.temperature:
            raise ValueError(
                f"trainer.temperature ({self.trainer.temperature}) must equal rollout.temperature "
                f"({self.rollout.temperature}): the trainer scores tokens under the sampling distribution"
            )
        if self.trainer.data_parallel > 1 and self.placement.backend != "local":
            raise ValueError(
                'trainer.data_parallel > 1 runs on placement.backend = "local" (ranks on this machine, '
                "or torchrun's); the Ray placement trains in one actor"
            )
        if self.model.bootstrap.rename and self.tasks.source != "multistep":
            raise ValueError(
                "model.bootstrap.rename renames the multistep expert's transcripts: it needs "
                'tasks.source = "multistep"'
            )
        if self.model.bootstrap.grep and self.tasks.source != "multistep":
            raise ValueError(
                "model.bootstrap.grep changes how the multistep expert finds the buggy module: it needs "
                f"tasks.source = 'multistep', not {self.tasks.source!r}"
            )
        if self.model.bootstrap.fresh_names and self.tasks.source != "multistep":
            raise ValueError(
                "model.bootstrap.fresh_names makes multistep tasks under made-up names: it needs "
                f"tasks.source = 'multistep', not {self.tasks.source!r}"
            )
        return self
