"""Every ```python block of the README runs as it stands, in order, as one script (a reader pastes them)."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    return [textwrap.dedent(m.group(2)) for m in re.finditer(r"^( *)```python\n(.*?)^\1```", text,
                                                              flags=re.S | re.M)]


def test_readme_has_python_blocks():
    assert len(_blocks()) >= 5


@pytest.mark.slow
def test_readme_python_blocks_run_in_order(tmp_path):
    parts, starts = [], []
    line = 1
    for i, b in enumerate(_blocks()):
        starts.append((line, i))
        parts.append(f"# ---- README block {i}\n{b}")
        line += parts[-1].count("\n")
    script = tmp_path / "readme_blocks.py"
    script.write_text("".join(parts))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        m = re.findall(r'readme_blocks\.py", line (\d+)', r.stderr)
        where = ""
        if m:
            ln = int(m[-1])
            block = max(i for start, i in starts if start <= ln)
            where = f" (README python block {block}, script line {ln})"
        pytest.fail(f"README blocks failed{where}:\n{r.stderr[-3000:]}")
