"""The sandbox: where untrusted candidates run, under verify/ and profile/ alike.

Worker processes and their pool (`pool`, `zygote`, `env`), the contract between caller and child
(`protocol`: a request and a result dataclass per kind), how a child finds the function that serves
its request (`dispatch`), loading a problem and a candidate in a child (`harness`, with `settings`,
`tripwire`, `recorder`), the device's quiet lock (`quiet`), host GPU facts (`gpus`) and measured device
ceilings (`ceilings`). The trusted clocks are the backends' (`kforge.backends.clocks`).

Nothing here imports `kforge.verify` or `kforge.profile`: they register the request kinds they serve
(`dispatch.register`) and declare their messages beside their handlers. This file imports nothing.
"""
