"""nbval settings for the chapters: stderr (warnings, progress bars) is not compared."""
import nbval.plugin

_compare_outputs = nbval.plugin.IPyNbCell.compare_outputs


def _without_stderr(outputs):
    return [out for out in outputs if not (out.get("output_type") == "stream" and out.get("name") == "stderr")]


def compare_outputs_without_stderr(self, test, ref, skip_compare=None):
    return _compare_outputs(self, _without_stderr(test), _without_stderr(ref), skip_compare)


nbval.plugin.IPyNbCell.compare_outputs = compare_outputs_without_stderr
