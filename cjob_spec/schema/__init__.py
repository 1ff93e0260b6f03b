"""The CheckpointedJob's and the CheckpointedJobSnapshot's schemas, written once: the
CRDs are rendered from them and the parser reads each section's fields, patterns and
string lengths from them.

``cjob_spec.defaults`` holds every default and bound, the model's enums every choice;
this package adds the shape and what ``kubectl explain`` shows, and ``crd`` renders
the CustomResourceDefinitions the API server validates and defaults with. The package
imports none of its modules, so the model's modules may use ``patterns`` without a
cycle through the schemas that use the model.
"""
