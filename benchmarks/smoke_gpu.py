"""Quick GPU smoke check of every example (correctness only)."""
import importlib
import sys
import time
import traceback

sys.path.insert(0, "examples")
for name in ["vector_add", "softmax", "layernorm", "rmsnorm"]:
    t = time.time()
    try:
        importlib.import_module(name).main()
    except Exception:
        traceback.print_exc()
    print(f"[{name}: {time.time() - t:.2f}s]", flush=True)
