// Package drillreport is a disaster recovery drill's report as it is
// signed and kept (docs/operations.md, "Drills"): the document `cellpay
// drill` writes and signs with the operators' certificate (hop.Ops), the
// GTR verifies and keeps (Admin.RecordDrill), and gtrctl verifies again
// when it lists them, trusting the platform's CA, not the GTR.
//
// A Signed report is the document's bytes exactly as signed, the
// signature and the signer's certificate chain (PEM). It verifies when
// the chain verifies against the platform's CA for client
// authentication, the certificate names hop.Ops, and the signature of
// the bytes verifies with its key; then the bytes are decoded, bounded.
// Nothing here reads files, the clock or the network.
package drillreport

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cellpay/cellpay/internal/certsig"
	"github.com/cellpay/cellpay/internal/hop"
)

// Kind names the document's format; a document of another kind is
// refused.
const Kind = "cellpay.drill.report/v1"

// Bounds of a signed report.
const (
	// MaxReport bounds the document's bytes: the summary and the drill's
	// report without its calls (tens of KiB for a drill of many cuts).
	MaxReport = 64 << 10
	// MaxSignature bounds a signature (an ECDSA P-521 one is 139 bytes).
	MaxSignature = 512
	// MaxCertificate bounds the signer's chain, PEM.
	MaxCertificate = certsig.MaxChainBytes
	// maxCuts and maxCodes bound a summary's lists.
	maxCuts, maxCodes = 64, 32
)

// signContext separates a report's signatures from any other use of the
// operators' key (TLS signs its own contexts).
const signContext = "cellpay drill report v1\x00"

// Digest is what a report's signature signs: SHA-256 of the context
// string and the report's bytes.
func Digest(report []byte) []byte {
	h := sha256.New()
	h.Write([]byte(signContext))
	h.Write(report)
	return h.Sum(nil)
}

// Document is what is signed.
type Document struct {
	Kind    string  `json:"kind"`
	Summary Summary `json:"summary"`
	// Report is the drill's whole report (package internal/dev/drill's
	// JSON), kept as it was written; readers need only Summary.
	Report json.RawMessage `json:"report,omitempty"`
}

// Summary is what a list of drills shows: derived by the drill from its
// report, and signed with it.
type Summary struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Cuts are what was cut, in order, with the RTO a partner saw.
	Cuts []Cut `json:"cuts"`
	// Passed: no partner error, no FAILED answer, and the checker (when
	// it ran) found nothing.
	Passed bool `json:"passed"`
	// PartnerErrors counts the errors partners saw by gRPC code; Failed
	// the FAILED answers.
	PartnerErrors map[string]int `json:"partner_errors,omitempty"`
	Failed        int            `json:"failed"`
	Sent          int64          `json:"sent"`
	// RPO is the checker's; nil when it did not run.
	RPO *RPO `json:"rpo,omitempty"`
}

// Cut is one target of a drill.
type Cut struct {
	Target string `json:"target"`
	// RTO: from the cut to the end of the last call it disturbed, in
	// seconds (0: none was); Longest: the longest call sent during it.
	RTO     float64 `json:"rto_s"`
	Longest float64 `json:"longest_s"`
	// Errors: partner-visible errors among the calls sent during it.
	Errors int `json:"errors"`
}

// RPO is what the checker found lost.
type RPO struct {
	AnswersLost          int `json:"answers_lost"`
	EffectsWithoutRecord int `json:"effects_without_record"`
	// Unresolved: answers still PENDING when the checker ran.
	Unresolved int `json:"unresolved"`
}

// Verdict is "PASS" or "FAIL".
func (s Summary) Verdict() string {
	if s.Passed {
		return "PASS"
	}
	return "FAIL"
}

// Marshal is the document's bytes, to be signed: compact JSON.
func (d Document) Marshal() ([]byte, error) {
	d.Kind = Kind
	b, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("drillreport: %w", err)
	}
	if len(b) > MaxReport {
		return nil, fmt.Errorf("drillreport: the report is %d bytes, at most %d", len(b), MaxReport)
	}
	return b, nil
}

// ErrDocument: the signed bytes are not a drill report of this Kind.
var ErrDocument = errors.New("drillreport: not a drill report")

// DecodeDocument reads a document's bytes, bounded: at most MaxReport
// bytes, Kind, at most 64 cuts and 32 error codes.
func DecodeDocument(b []byte) (Document, error) {
	var d Document
	if len(b) > MaxReport {
		return d, fmt.Errorf("%w: %d bytes, at most %d", ErrDocument, len(b), MaxReport)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		return Document{}, fmt.Errorf("%w: %v", ErrDocument, err)
	}
	if dec.More() {
		return Document{}, fmt.Errorf("%w: bytes after the document", ErrDocument)
	}
	switch {
	case d.Kind != Kind:
		return Document{}, fmt.Errorf("%w: kind %q, want %q", ErrDocument, d.Kind, Kind)
	case len(d.Summary.Cuts) > maxCuts:
		return Document{}, fmt.Errorf("%w: %d cuts, at most %d", ErrDocument, len(d.Summary.Cuts), maxCuts)
	case len(d.Summary.PartnerErrors) > maxCodes:
		return Document{}, fmt.Errorf("%w: %d error codes, at most %d", ErrDocument, len(d.Summary.PartnerErrors), maxCodes)
	case d.Summary.Start.IsZero():
		return Document{}, fmt.Errorf("%w: no start", ErrDocument)
	}
	return d, nil
}

// Signed is a report as signed and kept.
type Signed struct {
	// Report is the document's bytes exactly as signed.
	Report []byte `json:"report"`
	// Signature signs SHA-256 of a context string and Report.
	Signature []byte `json:"signature"`
	// Certificate is the signer's chain, PEM, leaf first.
	Certificate []byte `json:"certificate"`
}

// ID names a report: the first 8 bytes of its bytes' SHA-256, in hex. The
// same bytes signed again have the same ID.
func ID(report []byte) string {
	s := sha256.Sum256(report)
	return hex.EncodeToString(s[:8])
}

// Sign signs report (a Document's bytes) with cert, which must be the
// operators' (hop.Ops).
func Sign(report []byte, cert tls.Certificate) (Signed, error) {
	if len(report) > MaxReport {
		return Signed{}, fmt.Errorf("drillreport: the report is %d bytes, at most %d", len(report), MaxReport)
	}
	if len(cert.Certificate) == 0 {
		return Signed{}, errors.New("drillreport: no certificate")
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return Signed{}, fmt.Errorf("drillreport: %w", err)
	}
	if got := hop.CertIdentity(leaf); got != hop.Ops {
		return Signed{}, fmt.Errorf("drillreport: the certificate is %q's, not the operators' (%s)", got, hop.Ops)
	}
	key, err := certsig.Signer(cert.PrivateKey)
	if err != nil {
		return Signed{}, fmt.Errorf("drillreport: %w", err)
	}
	sig, err := certsig.Sign(key, Digest(report))
	if err != nil {
		return Signed{}, fmt.Errorf("drillreport: sign: %w", err)
	}
	return Signed{Report: report, Signature: sig, Certificate: certsig.EncodePEM(cert.Certificate)}, nil
}

// FieldError is a bound a Signed report broke, naming its field
// (report, signature, certificate).
type FieldError struct {
	Field, Reason string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Verified is a report that verified.
type Verified struct {
	ID       string
	Document Document
	// Signer is the certificate's identity, CertID its ID
	// (certsig.CertID), Subject its subject.
	Signer, CertID, Subject string
}

// Verify verifies s against roots, the platform's CA, as of at: the
// chain for client authentication, the identity hop.Ops, the signature;
// then decodes the document. A zero at verifies the chain as of the
// certificate's start, for a report kept longer than the certificate
// that signed it lives (the GTR verified it as of the time it was
// recorded). Errors: *FieldError for a bound broken, else wrapping
// certsig.ErrCertificate, ErrChain, ErrIdentity, ErrSignature or
// ErrDocument.
func Verify(s Signed, roots *x509.CertPool, at time.Time) (Verified, error) {
	switch {
	case len(s.Report) == 0 || len(s.Report) > MaxReport:
		return Verified{}, &FieldError{"report", fmt.Sprintf("%d bytes, want 1 to %d", len(s.Report), MaxReport)}
	case len(s.Signature) == 0 || len(s.Signature) > MaxSignature:
		return Verified{}, &FieldError{"signature", fmt.Sprintf("%d bytes, want 1 to %d", len(s.Signature), MaxSignature)}
	case len(s.Certificate) == 0 || len(s.Certificate) > MaxCertificate:
		return Verified{}, &FieldError{"certificate", fmt.Sprintf("%d bytes, want 1 to %d", len(s.Certificate), MaxCertificate)}
	}
	chain, err := certsig.ParsePEM(s.Certificate)
	if err != nil {
		return Verified{}, fmt.Errorf("certificate: %w", err)
	}
	leaf := chain[0]
	if at.IsZero() {
		at = leaf.NotBefore.Add(time.Second)
	}
	if err := certsig.VerifyCert(chain, roots, x509.ExtKeyUsageClientAuth, at, hop.Ops); err != nil {
		return Verified{}, fmt.Errorf("certificate: %w", err)
	}
	if !certsig.Verify(leaf.PublicKey, Digest(s.Report), s.Signature) {
		return Verified{}, fmt.Errorf("signature: %w", certsig.ErrSignature)
	}
	d, err := DecodeDocument(s.Report)
	if err != nil {
		return Verified{}, fmt.Errorf("report: %w", err)
	}
	return Verified{ID: ID(s.Report), Document: d, Signer: hop.CertIdentity(leaf), CertID: certsig.CertID(leaf.Raw),
		Subject: leaf.Subject.String()}, nil
}
