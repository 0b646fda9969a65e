"""inhabit.models: tiny models, model loading, the project's tokenizer, and MoE router replay.

Modules (import them directly; this package imports nothing heavy):

* `tiny`: `TinyModelSpec`, `PRESETS`, `build_tiny_model`, `count_parameters`, `save_model_folder`.
* `loading`: `load_model(path)` for any local Hugging Face folder, never touching a hub.
* `tokenizer`: byte-level BPE (`train_tokenizer`, `default_tokenizer`) and the chat template.
* `corpus`: the synthetic training text for the tokenizer (`build_default_corpus`).
* `routing`: `moe_layers`, `RoutingCapture`, `RoutingReplay` for Qwen3-MoE-style routers.
* `cli`: `inhabit model build` and `inhabit model info`.
"""
