package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/cellpay/cellpay/internal/partners"
	"github.com/cellpay/cellpay/pkg/adminproto"
)

// partnerCommands manage the partner registry. add and add-key print the
// new API key once (or write it to --key-out, 0600, and print only its ID):
// the GTR keeps its hash only, so nothing can show it again.
func partnerCommands() []command {
	var (
		currency, markets, types string
		homeSite                 string
		rate                     float64
		burst, inFlight          int
		keyOut                   string
		force                    bool
	)
	keyOutFlag := func(fs *flag.FlagSet) {
		fs.StringVar(&keyOut, "key-out", "", "write the new API key to this file (mode 0600) instead of printing it")
	}
	return []command{
		{name: "partners list", help: "list partners: status, home site, markets, payment types, limits, callbacks, key IDs",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 0 {
					return errUsage
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.ListPartners(cctx, &adminproto.ListPartnersRequest{})
				if err != nil {
					return err
				}
				return c.printPartners(resp)
			}},
		{name: "partners add", args: "PARTNER", help: "add an active partner with one new API key, printed once",
			flags: func(fs *flag.FlagSet) {
				fs.StringVar(&currency, "currency", "", "settlement currency (ISO 4217); default: the transaction's")
				fs.StringVar(&markets, "markets", "", "comma-separated markets (ISO 3166-1 alpha-2) allowed; default: all")
				fs.StringVar(&types, "types", "", "comma-separated payment types allowed (CARD_AUTHORIZATION, CARD_REFUND, BANK_TRANSFER); default: all")
				fs.Float64Var(&rate, "rate", 0, "transactions per second allowed; 0: the default")
				fs.IntVar(&burst, "burst", 0, "burst above the rate; 0: the default")
				fs.IntVar(&inFlight, "max-in-flight", 0, "transactions in flight at once; 0: the default")
				fs.StringVar(&homeSite, "home-site", "", "the partner's home site, such as site-a (shown to operators; nothing routes by it yet); default: none")
				keyOutFlag(fs)
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				if err := checkKeyOut(keyOut); err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.AddPartner(cctx, &adminproto.AddPartnerRequest{
					PartnerId: args[0], SettlementCurrency: currency, Markets: list(markets), PaymentTypes: list(types),
					Limits:   &adminproto.PartnerLimits{RatePerSecond: rate, Burst: int32(burst), MaxInFlight: int32(inFlight)},
					HomeSite: homeSite,
				})
				if err != nil {
					return err
				}
				if !c.json() {
					fmt.Fprintf(c.out, "partner %s added (%s), registry version %d\n", resp.GetPartner().GetId(), partnerStatus(resp.GetPartner()), resp.GetRegistryVersion())
				}
				return c.printNewKey(resp, resp.GetPartner().GetId(), resp.GetKey(), keyOut)
			}},
		{name: "partners suspend", args: "PARTNER", help: "refuse every call of a partner (its keys stay)",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.partnerChange(ctx, func(cctx context.Context) (*adminproto.PartnerChange, error) {
					return c.client.SuspendPartner(cctx, &adminproto.SuspendPartnerRequest{PartnerId: args[0]})
				})
			}},
		{name: "partners resume", args: "PARTNER", help: "let a suspended partner call again",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				return c.partnerChange(ctx, func(cctx context.Context) (*adminproto.PartnerChange, error) {
					return c.client.ResumePartner(cctx, &adminproto.ResumePartnerRequest{PartnerId: args[0]})
				})
			}},
		{name: "partners set-home-site", args: "PARTNER [SITE]", help: "set a partner's home site, whose cells routing prefers for it; no SITE: none",
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) < 1 || len(args) > 2 {
					return errUsage
				}
				site := ""
				if len(args) == 2 {
					site = args[1]
				}
				return c.partnerChange(ctx, func(cctx context.Context) (*adminproto.PartnerChange, error) {
					return c.client.SetPartnerHomeSite(cctx, &adminproto.SetPartnerHomeSiteRequest{PartnerId: args[0], HomeSite: site})
				})
			}},
		{name: "partners add-key", args: "PARTNER", help: "give a partner another API key (rotation), printed once",
			flags: keyOutFlag,
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 1 {
					return errUsage
				}
				if err := checkKeyOut(keyOut); err != nil {
					return err
				}
				cctx, cancel := c.call(ctx)
				defer cancel()
				resp, err := c.client.AddKey(cctx, &adminproto.AddKeyRequest{PartnerId: args[0]})
				if err != nil {
					return err
				}
				if !c.json() {
					fmt.Fprintf(c.out, "partner %s: key added, %d keys, registry version %d\n", resp.GetPartner().GetId(), len(resp.GetPartner().GetKeys()), resp.GetRegistryVersion())
				}
				return c.printNewKey(resp, resp.GetPartner().GetId(), resp.GetKey(), keyOut)
			}},
		{name: "partners revoke-key", args: "PARTNER KEY_ID", help: "revoke one of a partner's keys (by its ID, as list shows it); the last one only with --force",
			flags: func(fs *flag.FlagSet) {
				fs.BoolVar(&force, "force", false, "revoke the partner's last key too, which refuses all its calls")
			},
			run: func(ctx context.Context, c *cli, args []string) error {
				if len(args) != 2 {
					return errUsage
				}
				return c.partnerChange(ctx, func(cctx context.Context) (*adminproto.PartnerChange, error) {
					return c.client.RevokeKey(cctx, &adminproto.RevokeKeyRequest{PartnerId: args[0], KeyId: args[1], Force: force})
				})
			}},
	}
}

// list splits a comma-separated flag value; "" is none.
func list(s string) []string {
	var out []string
	for v := range strings.SplitSeq(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// checkKeyOut makes sure, before a key is made, that --key-out can be
// written: a key made and then lost would have to be revoked.
func checkKeyOut(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gtrctl-key-check-*")
	if err != nil {
		return fmt.Errorf("--key-out: %w", err)
	}
	f.Close()
	return os.Remove(f.Name())
}

// printNewKey shows a new key, k (part of resp), once: on stdout with a
// warning, or written to keyOut with only its ID shown. In JSON resp is
// printed whole, without the key when it went to keyOut.
func (c *cli) printNewKey(resp proto.Message, partner string, k *adminproto.NewKey, keyOut string) error {
	if keyOut != "" {
		if err := partners.WriteKeyFile(keyOut, k.GetApiKey()); err != nil {
			return fmt.Errorf("key %s of partner %s was made but could not be written (%w); revoke it: gtrctl partners revoke-key %s %s",
				k.GetKeyId(), partner, err, partner, k.GetKeyId())
		}
		k.ApiKey = ""
	}
	switch {
	case c.json():
		if err := c.printJSON(resp); err != nil {
			return err
		}
		if keyOut == "" {
			fmt.Fprintln(c.errOut, "The api_key above will not be shown again: store it now.")
		}
	case keyOut != "":
		fmt.Fprintf(c.out, "key %s written to %s (mode 0600); it will not be shown again\n", k.GetKeyId(), keyOut)
	default:
		fmt.Fprintf(c.out, "key ID   %s\nAPI key  %s\nThis API key will not be shown again: store it now (or use --key-out FILE).\n", k.GetKeyId(), k.GetApiKey())
	}
	return nil
}

// partnerChange makes a change and prints the partner after it.
func (c *cli) partnerChange(ctx context.Context, do func(context.Context) (*adminproto.PartnerChange, error)) error {
	cctx, cancel := c.call(ctx)
	resp, err := do(cctx)
	cancel()
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	p := resp.GetPartner()
	home := ""
	if s := p.GetHomeSite(); s != "" {
		home = ", home site " + s
	}
	fmt.Fprintf(c.out, "partner %s: %s, %d keys%s, registry version %d\n", p.GetId(), partnerStatus(p), len(p.GetKeys()), home, resp.GetRegistryVersion())
	return nil
}

func partnerStatus(p *adminproto.Partner) string {
	switch p.GetStatus() {
	case adminproto.PartnerStatus_PARTNER_STATUS_ACTIVE:
		return "active"
	case adminproto.PartnerStatus_PARTNER_STATUS_SUSPENDED:
		return "suspended"
	}
	return "unknown"
}

func (c *cli) printPartners(resp *adminproto.ListPartnersResponse) error {
	if c.json() {
		return c.printJSON(resp)
	}
	fmt.Fprintf(c.out, "registry version %d, replica %s, config store %s\n\n", resp.GetRegistryVersion(), resp.GetReplicaId(), resp.GetConfigStore())
	tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTNER\tSTATUS\tHOME SITE\tCURRENCY\tMARKETS\tPAYMENT TYPES\tLIMITS (EFFECTIVE)\tKEYS\tCALLBACKS")
	for _, p := range resp.GetPartners() {
		l := p.GetEffectiveLimits()
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%g/s, burst %d, in flight %d\t%d\t%s\n",
			p.GetId(), partnerStatus(p), orDash(p.GetHomeSite()), orDash(p.GetSettlementCurrency()), orAll(p.GetMarkets()), orAll(p.GetPaymentTypes()),
			l.GetRatePerSecond(), l.GetBurst(), l.GetMaxInFlight(), len(p.GetKeys()), callbacks(p.GetCallbacks()))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.out)
	tw = tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY ID\tPARTNER\tCREATED")
	for _, p := range resp.GetPartners() {
		for _, k := range p.GetKeys() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k.GetKeyId(), p.GetId(), k.GetCreated().AsTime().UTC().Format(time.RFC3339))
		}
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orAll(v []string) string {
	if len(v) == 0 {
		return "all"
	}
	return strings.Join(v, ",")
}

func callbacks(cb *adminproto.PartnerCallbacks) string {
	if len(cb.GetEndpoints()) == 0 {
		return "-"
	}
	s := orDash(cb.GetMode()) + ": " + strings.Join(cb.GetEndpoints(), ", ")
	if n := cb.GetSigningSecrets(); n > 0 {
		s += fmt.Sprintf(" (%d signing secrets)", n)
	}
	return s
}
