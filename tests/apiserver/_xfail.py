"""The steps the embedded server does not answer as the real one yet: step id -> reason.

Each entry marks its step ``xfail(strict=True)``: when a fix makes the step pass, the test
XPASSes and fails, so remove the entry with the fix. ``python -m tests.apiserver._report --stale``
lists the entries that pass now; ``python -m tests.apiserver._report`` prints every difference.
Details and where each fix belongs: GAPS.md.
"""

XFAIL: dict[str, str] = {
    "cr.create": "cr: unknown fields not pruned; managedFields differ; managedFields lack the '.' entries",
    "cr.create_invalid_type": "cr: answers 201 Widget, the real server 422 Status",
    "cr.create_wrong_kind": "cr: wrong kind in the body is 400 BadRequest (real: 422 Invalid, cause FieldValueInvalid@kind)",
    "cr.list_all_namespaces": "cr: w2 (invalid spec.size) was accepted so it is listed; managedFields differ",
    "ssa.apply_cr_status": "ssa: managedFields: status apply entry lacks subresource=status; status fields owned by the Update entry",
    "schema.create_defaults_pruning": "schema: no pruning of unknown fields, no defaults, no Warning headers for unknown fields",
    "schema.create_unknown_strict": "schema: answers 201 Shape, the real server 400 Status",
    "schema.create_duplicate_field_strict": "schema: answers 201 Shape, the real server 400 Status",
    "schema.invalid_missing_required": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_wrong_type_object": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_wrong_type_array": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_minimum": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_maximum": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_pattern": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_max_items": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_int_or_string": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_additional_properties": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_cel_rule": "schema: answers 201 Shape, the real server 422 Status",
    "schema.invalid_multiple": "schema: answers 201 Shape, the real server 422 Status",
    "schema.update_violation": "schema: answers 200 Shape, the real server 422 Status",
    "schema.update_unset_defaulted": "schema: no pruning/defaulting; generation bumped by the unpruned update",
    "schema.status_patch_valid": "schema: spec was not pruned/defaulted and the invalid update was accepted; generation differs",
    "schema.status_patch_minimum": "schema: answers 200 Shape, the real server 422 Status",
    "schema.status_patch_condition_required": "schema: answers 200 Shape, the real server 422 Status",
    "schema.get_after_status": "schema: spec was not pruned/defaulted and the invalid update was accepted; generation differs",
    "schema.status_put_invalid": "schema: answers 200 Shape, the real server 422 Status",
    "limits.list_rv_future_not_older_than": "limits: a list at a future resourceVersion answers now (real: 504 Timeout, cause ResourceVersionTooLarge)",
    "limits.get_rv_future": "limits: a get at a future resourceVersion answers now (real: 504 Timeout, cause ResourceVersionTooLarge)",
}
