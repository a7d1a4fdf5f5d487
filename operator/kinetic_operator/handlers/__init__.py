"""Kopf handlers, one module per resource. Importing a module registers its handlers."""
