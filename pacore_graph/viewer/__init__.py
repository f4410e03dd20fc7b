"""``pacore view``: a run folder in the browser, read only (``open_folder``, ``ViewServer``, ``write_report``).

Every kind of folder the project writes (PaCoRe runs, the math and MultiChallenge benchmarks, SWE runs and their
evaluations) becomes an index of problems and, one problem at a time, its rounds as a grid of trajectories. The
page is plain HTML, CSS and JavaScript shipped with the package: no build step, nothing fetched from elsewhere.
"""
