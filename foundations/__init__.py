"""The shared foundations every app builds on, and no app's domain: the domain
error type, who acts (`actors`), ids read from untrusted text, logs, metrics,
traces, the REST API's base classes and role policy, the console's kit (role
checks, the shape of an action, refusals, paging), deployment-wide locks, the rules of a tenant's
named resources, the expression language (CEL), and the process's I/O event
loop.

A plain package, not a Django app: it has no models, so nothing here can carry
a migration. It imports no app, with one exception written in pyproject.toml's
contracts: the API's and the console's role policies read the accounts models
(memberships, API keys).
"""
