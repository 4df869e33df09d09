package admin

import (
	"strings"

	"github.com/cellpay/cellpay/internal/operators"
)

// servicePrefix is the Admin service's method prefix.
const servicePrefix = "/cellpay.admin.v1.Admin/"

// policy is the role each Admin method needs: the one table of who may do
// what. A method missing from it is refused to everyone (TestPolicyCovers
// fails for any method of the service descriptor missing here, so a new
// RPC cannot be left open or closed by accident). Every method needing
// more than viewer changes something and is audited.
var policy = map[string]operators.Role{
	"ListCells":         operators.RoleViewer,
	"Explain":           operators.RoleViewer,
	"RouteKeys":         operators.RoleViewer,
	"GetTable":          operators.RoleViewer,
	"GetEffectiveTable": operators.RoleViewer,
	"ListPartners":      operators.RoleViewer,
	"ListCallbacks":     operators.RoleViewer,
	"FindTransaction":   operators.RoleViewer,
	"FindReference":     operators.RoleViewer,
	"GetStatement":      operators.RoleViewer,
	"ListAudit":         operators.RoleViewer,
	"ListDrills":        operators.RoleViewer,
	"GetDrill":          operators.RoleViewer,

	"SetWeight":       operators.RoleOperator,
	"Drain":           operators.RoleOperator,
	"Restore":         operators.RoleOperator,
	"EvacuateSite":    operators.RoleOperator,
	"RestoreSite":     operators.RoleOperator,
	"ReplayCallbacks": operators.RoleOperator,
	"RecordDrill":     operators.RoleOperator,

	"ApplyTable":         operators.RoleAdmin,
	"AddPartner":         operators.RoleAdmin,
	"SuspendPartner":     operators.RoleAdmin,
	"ResumePartner":      operators.RoleAdmin,
	"SetPartnerHomeSite": operators.RoleAdmin,
	"AddKey":             operators.RoleAdmin,
	"RevokeKey":          operators.RoleAdmin,
	"SetCallbacks":       operators.RoleAdmin,
	"AddCallbackSecret":  operators.RoleAdmin,
	"ReleaseCell":        operators.RoleAdmin,
}

// otherServices are the other services of the admin listener: health is
// open (probes), reflection a read.
var otherServices = map[string]operators.Role{
	"/grpc.health.v1.Health/":                    operators.RoleNone,
	"/grpc.reflection.v1.ServerReflection/":      operators.RoleViewer,
	"/grpc.reflection.v1alpha.ServerReflection/": operators.RoleViewer,
}

// required is the role full method needs; open is true for a method that
// needs no token at all. An unknown method needs RoleNone with open false:
// nobody's role is below RoleNone, so deniedMessage says why.
func required(full string) (need operators.Role, open bool) {
	if name, ok := strings.CutPrefix(full, servicePrefix); ok {
		r, ok := policy[name]
		if !ok {
			return operators.RoleAdmin + 1, false
		}
		return r, false
	}
	for prefix, r := range otherServices {
		if strings.HasPrefix(full, prefix) {
			return r, r == operators.RoleNone
		}
	}
	return operators.RoleAdmin + 1, false
}

// audited reports whether a successful call of full method changes
// something, so that it is written to the audit log before it answers.
func audited(full string) bool {
	name, ok := strings.CutPrefix(full, servicePrefix)
	return ok && policy[name] > operators.RoleViewer
}

func shortName(full string) string {
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[i+1:]
	}
	return full
}
