"""inhabit.trainer: the RL trainer (losses, samples from trajectory records, train step, checkpoints).

Modules (import them directly; this package imports nothing heavy):

* `losses`: `LossConfig`, `group_advantages`, `policy_loss` (pure functions; token-level clipped
  objective or GSPO-style sequence ratio, truncated importance weights, ratio-band masking).
* `samples`: `Sample`, `group_samples(trajectories)` (one group = the G rollouts of one task),
  `trajectory_samples`, `segment_samples`, `is_trainable`, `split_stale`; prefix-safe merging of
  turns; `chat_sample` / `sft_samples` for supervised steps.
* `batching`: `pack_microbatches` under a padded-token budget, `collate` to padded tensors.
* `config`: `TrainerConfig` (the `[trainer]` table of a run).
* `optim`: AdamW and the warm-up/decay schedule.
* `metrics`: `StepMetrics` (what every step logs: loss, ratios, engine/trainer mismatch, routing
  disagreement, staleness, throughput).
* `trainer`: `Trainer` (`train_step`, `sft_step`, `sft_measure`, `measure`, `version`, `state_dict_for_engine`,
  `save`, `load`, `export_model`).
* `checkpoint`: atomic checkpoint folders, `latest_checkpoint`, `checkpoint_name`.
* `corpus`: text corpora built from files on this machine (deduplicated, split by file),
  `build_corpus`, `Corpus`; `lm_data`: their documents as packed next-token samples.

Typical loop (what the orchestrator does):

    trainer = Trainer.from_pretrained("out/model", TrainerConfig(lr=1e-4))
    samples = [s for group in groups for s in group_samples(group, normalize_std=False)]
    if samples:
        metrics = trainer.train_step(samples)          # trainer.version += 1
        await engine.load_weights(trainer.state_dict_for_engine(), trainer.version)
    trainer.data_state = {"next_task": i}
    trainer.save(run / "checkpoints" / checkpoint_name(trainer.version))
"""
