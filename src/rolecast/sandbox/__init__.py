"""The code sandbox: runs model-written programs isolated from the machine (docs/sandbox.md)."""
