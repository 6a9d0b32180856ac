# Run by the Python kernel at its start (IPKernelApp.exec_files, see
# kernelspecs.py), in the user's namespace: everything here lives inside one
# function that deletes itself, so `dir()` in a fresh context shows nothing of it.
#
# What it sets up: a display formatter that adds the figure's chart data (the
# SDKs' `chart`, see charts.py) under its own MIME type next to matplotlib's
# PNG. It recognises figures by class name, so matplotlib is not imported
# until a figure is shown.


def _locale2b_startup():
    import importlib.util
    import os
    import sys

    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    chart_mime = "application/vnd.locale2b.chart+json"
    here = os.path.dirname(os.path.abspath(__file__))
    charts = {}

    def load_charts():
        # charts.py is not on sys.path (the kernel runs in the user's cwd): load it by path, once.
        if "module" not in charts:
            spec = importlib.util.spec_from_file_location("_locale2b_charts", os.path.join(here, "charts.py"))
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules["_locale2b_charts"] = module
            charts["module"] = module
        return charts["module"]

    def figure_chart(fig):
        # A chart is extra: never let extracting one break the display of a figure.
        try:
            return load_charts().figure_chart(fig)
        except Exception:
            return None

    def is_figure(obj):
        return any(c.__module__ == "matplotlib.figure" and c.__name__ == "Figure" for c in type(obj).__mro__)

    class ChartFormatter(BaseFormatter):
        format_type = Unicode(chart_mime)
        print_method = ObjectName("_repr_locale2b_chart_")
        _return_type = (dict,)

        # Not a printer registered for Figure: enabling the inline backend
        # (IPython's select_figure_formats) drops every formatter's Figure printer.
        def __call__(self, obj):
            return figure_chart(obj) if self.enabled and is_figure(obj) else None

    shell = get_ipython()
    shell.display_formatter.formatters[chart_mime] = ChartFormatter(parent=shell.display_formatter)


_locale2b_startup()
del _locale2b_startup
