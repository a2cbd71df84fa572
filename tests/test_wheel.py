"""The wheel installs funcgrad, funcgrad.kernels and funcgrad.dist, and nothing top-level named kernels/dist."""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.timeout(300)
def test_wheel_installs_into_a_fresh_venv(tmp_path):
    wheels = tmp_path / "wheels"
    shutil.rmtree(os.path.join(ROOT, "build"), ignore_errors=True)  # a stale build/ would leak old modules in
    subprocess.run([sys.executable, "-m", "pip", "wheel", ROOT, "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels)], check=True, cwd=tmp_path)
    (whl,) = list(wheels.glob("funcgrad-*.whl"))
    names = zipfile.ZipFile(whl).namelist()
    assert "funcgrad/kernels/cpu.py" in names and "funcgrad/dist/__init__.py" in names
    assert not any(n.startswith(("kernels/", "dist/")) for n in names), "kernels/dist installed at top level"
    # every package of the repository is in the wheel (pyproject lists packages by hand)
    for part, folder in (("funcgrad", "funcgrad"), ("funcgrad/kernels", "kernels"), ("funcgrad/dist", "dist")):
        for dirpath, _, files in os.walk(os.path.join(ROOT, folder)):
            if "__init__.py" in files and "__pycache__" not in dirpath:
                rel = os.path.relpath(dirpath, os.path.join(ROOT, folder)).replace(os.sep, "/")
                pkg = part if rel == "." else f"{part}/{rel}"
                assert f"{pkg}/__init__.py" in names, f"package {pkg} is missing from the wheel (pyproject packages)"

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    # the fresh venv reuses this environment's dependencies (numba, numpy, scipy) but not its funcgrad
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "deps.pth"), "w") as f:
        f.write(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)], check=True)
    script = tmp_path / "use_it.py"
    script.write_text("import funcgrad, funcgrad.kernels, funcgrad.kernels.cpu, funcgrad.dist, numpy as np\n"
                      "print(funcgrad.__file__)\nprint(funcgrad.dist.__file__)\n"
                      "print(funcgrad.grad(lambda x: (x * x).sum())(np.arange(3.0)))\n")
    out = subprocess.run([str(py), str(script)], capture_output=True, text=True, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith(str(venv)) and lines[1].startswith(str(venv)), lines
    assert lines[2] == "[0. 2. 4.]"
