"""`kinetic dashboard`: a local web view of jobs and batches, live from shared watches.

An optional extra of the client (``pip install 'kinetic[dashboard]'``): the slim
client and the runner never import it. The server listens on loopback only,
acts with the user's own kubeconfig and storage credentials, and is reached
through a random token exchanged for a cookie (`kinetic.dashboard.guard`).

The rooms inside: pure decisions (`guard`, `tables`, `charts`, `export`,
`tracebacks`) that the unit tests drive; the thin layer that reads through the
client's own handles (`reads`, `actions`) and the shared watches (`hub`); the
web server (`server`) and the page it serves (`static/`, our own code: no
third-party JavaScript or CSS, no CDN, no build step).
"""
