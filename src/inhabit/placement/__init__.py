"""inhabit.placement: where the parts of a run live; each kind is a `Placement`
(inhabit.contracts) whose `setup()` starts the parts of one run attempt (`RunParts`).

local.py      LocalPlacement: everything on this machine; trainer_local.py (InProcessTrainer in a
              worker thread, ProcessTrainer in a child process, CPU pinning)
cluster.py    RayPlacement: engines, env servers and the trainer as Ray actors; actors.py (the
              actors), fleet.py (load and health of like actors), engines.py (InferenceEngine over
              actors), dispatch.py (rollouts placed, retried, cut), trainer_ray.py (TrainerHandle
              over the actor)
weight_sync.py  InProcessWeightSync (local) and StoreWeightSync (engines follow the weight store)
config.py     PlacementConfig and RayConfig

Only cluster/actor code imports Ray, inside functions. Nothing here imports `inhabit.orchestrator`
(tests/unit/test_import_graph.py): the orchestrator picks a placement and drives it.
"""
