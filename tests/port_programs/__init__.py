"""TS programs written against NVIDIA's reference TS import paths, as a TS user writes them.

tests/test_port_programs.py ports each one the way a user does (``warpsched.compat.port_imports``:
the reference imports become ``from warpsched import``), compiles it on the CPU with fake tensors
and pins its barrier / TMA / tcgen05 instruction counts. These files are data for that test: they
are never imported as they are (that would need the reference TS).
"""
