import pathlib
import sys

# tests import their helpers (install_cells, reference) as top-level modules
sys.path.insert(0, str(pathlib.Path(__file__).parent))
