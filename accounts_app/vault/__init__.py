"""Tenant secrets and the server environment, as tenants may use them.

- `keyring`: encryption at rest (Fernet keys from `TETHER_SECRETS_KEY`; the
  first encrypts, all decrypt, so keys rotate).
- `references`: how tools and agent profiles name a secret (`{secret:NAME}` in
  a header template, `model.api_key_secret`) or a granted environment
  variable (`model.api_key_env`), checked without reading any value.
- `grants`: which environment variables the operator lets a tenant use
  (`TETHER_ENV_GRANTS`); nothing else of the server's environment is readable.
- `values`: what resolving gives the caller (values never shown in a repr) and
  the redaction of those values from anything stored or logged.
- `lookup`: resolution at call time, for one tenant only. The only code that
  ever turns a reference into a value.

Writes (create, rotate, delete) are `accounts_app.services.secrets`.
"""
