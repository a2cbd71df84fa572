"""`make autograd-suite`: HIPS autograd's own tests run against funcgrad (see run.py)."""
