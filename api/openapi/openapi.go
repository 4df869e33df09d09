// Package openapi holds the OpenAPI document of the partners' REST API,
// generated from the protos by scripts/protogen.sh (make proto) and
// committed; the GTR serves it at /openapi.json.
package openapi

import _ "embed"

// V1 is the OpenAPI (2.0) document of cellpay.v1.
//
//go:embed cellpay.v1.swagger.json
var V1 []byte
