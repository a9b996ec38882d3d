"""autokernel-ci harness: five-stage verification, benchmark, sandboxed workers."""
