"""Tenant secrets: values a tenant stores for its tools and models, encrypted at rest.

Only the ciphertext (Fernet, keys from `TETHER_SECRETS_KEY`) is stored; the
value is never read back except by `accounts_app.vault.lookup` at call time.
A secret's name is unique within its tenant and is how tools and agent
profiles refer to it.
"""
from __future__ import annotations

from django.db import models

from .tenancy import Tenant


class TenantSecret(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="secrets")
    name = models.CharField(max_length=64)
    ciphertext = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=150)
    rotated_at = models.DateTimeField(null=True, blank=True)
    rotated_by = models.CharField(max_length=150, blank=True)

    class Meta:
        db_table = "tasks_app_tenantsecret"
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="secret_unique_name")
        ]

    def __str__(self) -> str:
        return self.name  # never the value
