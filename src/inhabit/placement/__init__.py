"""inhabit.placement: the parts of a run as Ray actors across machines (`placement.backend = "ray"`).

config.py (RayConfig), actors.py (engine, env server, trainer actors), fleet.py (load and health
of like actors), engines.py (InferenceEngine over actors), dispatch.py (rollouts placed, retried,
cut), weight_sync.py (engines follow the weight store), trainer.py (TrainerHandle over the actor),
cluster.py (RayPlacement, train_on_ray). Only cluster/actor code imports Ray, inside functions.
"""
