"""One job, from the Hydra config to the finished runs.

`config` reads the config once into typed dataclasses (`JobConfig`); `pipeline` builds the pool, the
backend, the problems, the agents and the observers from it and runs the loop; `console` prints the
progress; `reference` transfers a kernel from another accelerator or an earlier run as a reference;
`firstrun` says when the first build of a session will be slow. Nothing is imported here: the pipeline
imports every layer below it.
"""
