"""HTTP handlers, one APIRouter per resource."""
