"""The sandbox: where untrusted candidates run, under verify/ and profile/ alike.

Worker processes and their pool (`pool`, `zygote`, `env`), how a child finds the function that serves
its request (`dispatch`), loading a problem and a candidate in a child (`harness`, with `settings`,
`tripwire`, `recorder`), the trusted clocks (`clocks`), the device's quiet lock (`quiet`), host GPU
facts (`gpus`) and measured device ceilings (`ceilings`).

Nothing here imports `kforge.verify` or `kforge.profile`: they register the request kinds they serve
(`dispatch.register`). This file imports nothing, so a backend can use `kforge.sandbox.clocks`
without loading the pool.
"""
