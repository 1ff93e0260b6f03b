"""The CheckpointedJob's schema, written once: the CRD is rendered from it and the
parser reads each section's fields, patterns and bounds from it.

``cjob_spec.defaults`` holds every default and bound, the model's enums every choice;
this package adds the shape and what ``kubectl explain`` shows, and ``crd`` renders
the CustomResourceDefinition the API server validates and defaults with.
"""

from cjob_spec.schema.crd import crd_document, crd_text
from cjob_spec.schema.openapi import ObjectSchema
from cjob_spec.schema.spec_schema import SPEC

__all__ = ["SPEC", "ObjectSchema", "crd_document", "crd_text"]
