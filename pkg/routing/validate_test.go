package routing

import (
	"errors"
	"strings"
	"testing"
)

// validSpec is a small spec that passes Validate; cases break one thing.
func validSpec() Spec {
	return Spec{
		Version: 7,
		Cells: []Cell{
			{ID: "eu-1", Addr: "eu-1:7000", Pool: "eu", Weight: 100},
			{ID: "eu-2", Addr: "eu-2:7000", Pool: "eu", Weight: 50},
			{ID: "us-1", Addr: "us-1:7000", Pool: "us", Weight: 100},
		},
		Rules: []Rule{
			{Name: "eu-cards", Markets: []string{"DE", "FR"}, PaymentTypes: []string{PaymentCardAuthorization, PaymentCardRefund}, Pool: "eu", HashOn: HashMerchant},
			{Name: "big-partner", Partners: []string{"acme"}, Pool: "us"},
			{Name: "default", Pool: "eu"},
		},
	}
}

// specErrors flattens a (possibly joined) Validate error.
func specErrors(t *testing.T, err error) []*SpecError {
	t.Helper()
	var out []*SpecError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var se *SpecError
		if !errors.As(e, &se) {
			t.Fatalf("not a *SpecError: %T %v", e, e)
		}
		out = append(out, se)
	}
	if err != nil {
		walk(err)
	}
	return out
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(s *Spec)
		of     string
		who    string // Name, or "#i" when the offender has none
		field  string
		reason string // substring of the message
	}{
		{"no cells", func(s *Spec) { s.Cells = nil; s.Rules = nil }, "spec", "", "Cells", "no cells"},
		{"empty cell id", func(s *Spec) { s.Cells[1].ID = "" }, "cell", "#1", "ID", "empty id"},
		{"duplicate cell id", func(s *Spec) { s.Cells[2].ID = "eu-1" }, "cell", "eu-1", "ID", "duplicate id (also cell #0)"},
		{"empty addr", func(s *Spec) { s.Cells[0].Addr = "" }, "cell", "eu-1", "Addr", "empty addr"},
		{"empty cell pool", func(s *Spec) { s.Cells = append(s.Cells, Cell{ID: "x", Addr: "x:1", Weight: 1}) }, "cell", "x", "Pool", "empty pool"},
		{"addr and addrs", func(s *Spec) { s.Cells[0].Addrs = []string{"eu-1b:7000"} }, "cell", "eu-1", "Addrs", "both addr and addrs"},
		{"bad instance addr", func(s *Spec) { s.Cells[0].Addr, s.Cells[0].Addrs = "", []string{"eu-1:7000", "eu-1b"} }, "cell", "eu-1", "Addrs", `addrs[1] "eu-1b": not host:port`},
		{"dns instance addr", func(s *Spec) { s.Cells[0].Addr, s.Cells[0].Addrs = "", []string{"eu-1:7000", "dns:///eu:7000"} }, "cell", "eu-1", "Addrs", "goes in addr, alone"},
		{"instance twice", func(s *Spec) { s.Cells[0].Addr, s.Cells[0].Addrs = "", []string{"eu-1:7000", "eu-1:7000"} }, "cell", "eu-1", "Addrs", "listed twice"},
		{"empty pool name", func(s *Spec) { s.Pools = []Pool{{Balancer: BalancePriority}} }, "pool", "#0", "Name", "empty name"},
		{"pool entry with no cells", func(s *Spec) { s.Pools = []Pool{{Name: "asia"}} }, "pool", "asia", "Name", `pool "asia" has no cells`},
		{"duplicate pool entry", func(s *Spec) { s.Pools = []Pool{{Name: "eu"}, {Name: "eu"}} }, "pool", "eu", "Name", "duplicate pool (also pool #0)"},
		{"unknown balancer", func(s *Spec) { s.Pools = []Pool{{Name: "eu", Balancer: 7}} }, "pool", "eu", "Balancer", "unknown balancer Balancer(7)"},
		{"weight below 0", func(s *Spec) { s.Cells[0].Weight = -1 }, "cell", "eu-1", "Weight", "weight -1 outside 0..100"},
		{"weight above 100", func(s *Spec) { s.Cells[1].Weight = 101 }, "cell", "eu-2", "Weight", "weight 101 outside 0..100"},
		{"unknown state", func(s *Spec) { s.Cells[1].State = 9 }, "cell", "eu-2", "State", "unknown state CellState(9)"},
		{"site in capitals", func(s *Spec) { s.Cells[1].Site = "Site-A" }, "cell", "eu-2", "Site", `site "Site-A": want lowercase letters`},
		{"site with a space", func(s *Spec) { s.Cells[0].Site = "site a" }, "cell", "eu-1", "Site", `site "site a": want lowercase letters`},
		{"site too long", func(s *Spec) { s.Cells[2].Site = strings.Repeat("s", 33) }, "cell", "us-1", "Site", "site of 33 bytes, longer than 32"},
		{"empty rule name", func(s *Spec) { s.Rules[1].Name = "" }, "rule", "#1", "Name", "empty name"},
		{"duplicate rule name", func(s *Spec) { s.Rules[1].Name = "eu-cards" }, "rule", "eu-cards", "Name", "duplicate name (also rule #0)"},
		{"empty rule pool", func(s *Spec) { s.Rules[0].Pool = "" }, "rule", "eu-cards", "Pool", "empty pool"},
		{"pool with no cells", func(s *Spec) { s.Rules[0].Pool = "asia" }, "rule", "eu-cards", "Pool", `pool "asia" has no cells`},
		{"unknown payment type", func(s *Spec) { s.Rules[0].PaymentTypes = []string{"CASH"} }, "rule", "eu-cards", "PaymentTypes", `unknown payment type "CASH"`},
		{"payment type is case sensitive", func(s *Spec) { s.Rules[0].PaymentTypes = []string{"card_refund"} }, "rule", "eu-cards", "PaymentTypes", `unknown payment type "card_refund"`},
		{"unknown hash field", func(s *Spec) { s.Rules[1].HashOn = 4 }, "rule", "big-partner", "HashOn", "unknown hash field HashField(4)"},
		{"empty partner", func(s *Spec) { s.Rules[1].Partners = []string{"acme", ""} }, "rule", "big-partner", "Partners", "empty partner"},
		{"empty market", func(s *Spec) { s.Rules[0].Markets = []string{""} }, "rule", "eu-cards", "Markets", "empty market"},
		{"shadowed by catch-all", func(s *Spec) {
			s.Rules = append(s.Rules, Rule{Name: "late", Markets: []string{"US"}, Pool: "us"})
		}, "rule", "late", "", `shadowed by rule "default"`},
		{"shadowed by superset", func(s *Spec) {
			s.Rules = append([]Rule{s.Rules[0], {Name: "de-auth", Partners: []string{"p1"}, Markets: []string{"DE"}, PaymentTypes: []string{PaymentCardAuthorization}, Pool: "us"}}, s.Rules[1:]...)
		}, "rule", "de-auth", "", `shadowed by rule "eu-cards"`},
		{"identical rule", func(s *Spec) {
			s.Rules = append([]Rule{s.Rules[0], s.Rules[0]}, s.Rules[1:]...)
			s.Rules[1].Name = "again"
		}, "rule", "again", "", `shadowed by rule "eu-cards"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(&s)
			err := Validate(s)
			errs := specErrors(t, err)
			if len(errs) != 1 {
				t.Fatalf("Validate = %v, want exactly one problem", err)
			}
			e := errs[0]
			who := e.Name
			if who == "" && e.Of != "spec" {
				who = "#" + itoa(e.Index)
			}
			if e.Of != tt.of || who != tt.who || e.Field != tt.field {
				t.Errorf("got Of=%q who=%q Field=%q, want %q %q %q", e.Of, who, e.Field, tt.of, tt.who, tt.field)
			}
			if !strings.Contains(e.Error(), tt.reason) || !strings.HasPrefix(e.Error(), "routing: ") {
				t.Errorf("message %q does not say %q", e.Error(), tt.reason)
			}
			if tt.who != "" && !strings.Contains(e.Error(), tt.who) {
				t.Errorf("message %q does not name %q", e.Error(), tt.who)
			}
			if _, cerr := Compile(s); cerr == nil || cerr.Error() != err.Error() {
				t.Errorf("Compile error = %v, want the Validate error", cerr)
			}
		})
	}
}

func TestValidateMessage(t *testing.T) {
	s := validSpec()
	s.Rules[0].Pool = "asia"
	want := `routing: rule "eu-cards": pool "asia" has no cells`
	if err := Validate(s); err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want %s", err, want)
	}
}

func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name string
		edit func(s *Spec)
	}{
		{"base", func(*Spec) {}},
		{"no rules", func(s *Spec) { s.Rules = nil }},
		{"pool fully drained", func(s *Spec) { s.Cells[0].Weight = 0; s.Cells[1].State = CellDown }},
		{"unused pool", func(s *Spec) { s.Cells = append(s.Cells, Cell{ID: "ap-1", Addr: "ap:1", Pool: "ap", Weight: 100}) }},
		{"later rule broader than earlier", func(s *Spec) {
			// any partner is not covered by {acme}
			s.Rules = append([]Rule{{Name: "acme-de", Partners: []string{"acme"}, Markets: []string{"DE"}, Pool: "us"}}, s.Rules...)
		}},
		{"later list not a subset", func(s *Spec) {
			s.Rules = append([]Rule{s.Rules[0], {Name: "de-it", Markets: []string{"DE", "IT"}, Pool: "us"}}, s.Rules[1:]...)
		}},
		{"weights at the bounds", func(s *Spec) { s.Cells[0].Weight = 0; s.Cells[1].Weight = 100 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(&s)
			if err := Validate(s); err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
		})
	}
}

func TestValidateJoinsProblems(t *testing.T) {
	s := validSpec()
	s.Cells[0].Weight = 200
	s.Cells[1].Addr = ""
	s.Rules[1].Pool = "nowhere"
	errs := specErrors(t, Validate(s))
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	if strings.Join(got, ",") != "Weight,Addr,Pool" {
		t.Fatalf("fields = %v, want [Weight Addr Pool]", got)
	}
}

// TestCheckSite: a site is "" or a short lowercase DNS label.
func TestCheckSite(t *testing.T) {
	for _, ok := range []string{"", "a", "site-a", "lon1", "eu-west-2b", strings.Repeat("s", MaxSiteLen)} {
		if err := CheckSite(ok); err != nil {
			t.Errorf("CheckSite(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"Site-a", "site_a", "site.a", "-site", "site-", "1site", "site a", "sité", strings.Repeat("s", MaxSiteLen+1)} {
		if err := CheckSite(bad); err == nil {
			t.Errorf("CheckSite(%q) = nil, want an error", bad)
		}
	}
}

// TestSitesMoveNoKeyWithoutAHomeSite: naming the cells' sites changes no
// ranking of a partner with no home site, so that sites can be named
// before any partner is homed in one.
func TestSitesMoveNoKeyWithoutAHomeSite(t *testing.T) {
	plain := validSpec()
	named := validSpec()
	for i := range named.Cells {
		named.Cells[i].Site = []string{"site-a", "site-b"}[i%2]
	}
	a, b := mustCompile(t, plain), mustCompile(t, named)
	for _, attrs := range []Attrs{
		{PartnerID: "acme", Market: "US", PaymentType: PaymentBankTransfer},
		{PartnerID: "p-1", Market: "DE", PaymentType: PaymentCardAuthorization, MerchantID: "m-7"},
		{PartnerID: "p-2", Market: "GB", PaymentType: PaymentCardRefund},
	} {
		ra, erra := a.Route(&attrs, nil)
		rb, errb := b.Route(&attrs, nil)
		if erra != nil || errb != nil {
			t.Fatalf("%+v: %v / %v", attrs, erra, errb)
		}
		if ra.Rule.Name != rb.Rule.Name || len(ra.Ranked) != len(rb.Ranked) {
			t.Fatalf("%+v: %+v vs %+v", attrs, ra, rb)
		}
		for i := range ra.Ranked {
			if ra.Ranked[i].Cell.ID != rb.Ranked[i].Cell.ID {
				t.Errorf("%+v: rank %d is %s without sites, %s with", attrs, i, ra.Ranked[i].Cell.ID, rb.Ranked[i].Cell.ID)
			}
		}
	}
	if c, _ := b.Cell("eu-2"); c.Site != "site-b" {
		t.Errorf("compiled table's eu-2 site = %q, want site-b", c.Site)
	}
}
