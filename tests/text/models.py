"""models.py - where the text tests find their models: stories260K in ../shared/models,
SmolLM2-135M-Instruct through tests/fetch-models.sh, Gemma 3 270M (optional) through
tests/fetch-models.sh gemma3 when it knows that model, else gemma-3-270m-q4_k_m.gguf in the
model cache ($M40_MODEL_CACHE, default ~/.cache/m40-llm/models). Absent models are left
out."""
import os
import subprocess

ROOT = os.environ.get("M40_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))


def models():
    """[(name, path)] of the models present."""
    out = []
    stories = os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf")
    if os.path.exists(stories):
        out.append(("stories260K", stories))
    smol = fetch("smollm2")
    if smol:
        out.append(("smollm2", smol))
    gemma = fetch("gemma3")
    if not gemma:
        cache = os.environ.get("M40_MODEL_CACHE") or os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "m40-llm", "models")
        gemma = os.path.join(cache, "gemma-3-270m-q4_k_m.gguf")
    if os.path.exists(gemma):
        out.append(("gemma3", gemma))
    return out


def fetch(name):
    try:
        r = subprocess.run([os.path.join(ROOT, "tests", "fetch-models.sh"), name],
                           capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
