"""`python -m ccm.doctor`: checks a real environment before and after `sam deploy` and prints what to fix.

Layout: `gather` does every AWS / Kubernetes read and returns plain `facts`; `network`, `permissions` and `access`
are pure checks over those facts returning `Finding`s; `cli` renders them (table or JSON, exit code 1 on a fail).
Everything is read-only: the doctor never changes the environment it examines.
"""
