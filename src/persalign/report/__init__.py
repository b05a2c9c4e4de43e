"""Reports built only from a run directory's stored results.

- markdown.py: the paper-style tables (Table 9 layout), cost table, report.md;
- study_sections.py: Tables 2, 4, 5, 6, Finding 3 and the generated findings;
- html.py: report.html, the same tables plus Figures 1-3 as embedded PNGs.

    persalign report runs/demo/demo --format html
"""
