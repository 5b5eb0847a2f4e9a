# nbgrader settings for the maxmargin course: copy this file into your nbgrader course folder
# (next to source/), or add its lines to the nbgrader_config.py you have there.
c = get_config()  # noqa: F821 (nbgrader defines get_config when it reads this file)

# autograde stops a cell after this many seconds. nbgrader's default, 30 s, is too short: the
# book's slowest cell, chapter 3's ch03.settle(...) loop, ran 64 s on a shared two-core
# machine and 93 s on a busier one (chapter 7's ch07.factor_study(100, ...) 11 s, and it timed
# out at 30 s in two of three submissions on a loaded grader), and a grading machine runs
# many submissions at once. 600 s is six times the slowest cell measured under load, and
# still stops a notebook that hangs (a student's endless loop) within 10 minutes.
c.Execute.timeout = 600
