package directory

import (
	"errors"
)

// revision is one message of an entry's key, in the bucket's order.
type revision struct {
	seq    uint64
	marker bool // a delete or purge marker
	value  []byte
}

// verify folds the revisions of bucket key k, oldest first, into the
// entry readers rely on, by the directory's rules
// (docs/design/transaction-directory.md, "Unforgeable"):
//
//   - a revision counts only if it decodes, names k, and (with t) is signed
//     by the cell it names as owner, with a certificate of the platform's
//     CA for that cell's identity;
//   - the first that counts is the entry; after it, one counts only when
//     written by the owner of the entry so far (a final entry never
//     changes), or by another cell taking it over where the rules let it
//     (Entry.MayTakeOver: abandoned, or an earlier attempt of the same GTR
//     call, not pinned);
//   - delete and purge markers never count: no cell deletes an entry;
//   - an entry not final whose owner was declared lost after writing it
//     (released) may be taken over by any cell.
//
// Every other revision is ignored and counted. The entry's Revision is the
// key's last, ignored ones included, so that a write lands on top of them.
// found is false when no revision counts. An error (unavailable) means a
// revision could not be judged (its signer's certificate could not be
// read): no rule may then take the entry as absent.
//
// released(owner) is the revision of the record declaring owner lost for
// good (0: none; ReleaseKey): an entry that owner wrote before it, not
// final, may be taken over by any cell, and is marked Released.
func verify(k string, revs []revision, t *trust, fetch func(owner, id string) ([]byte, error), released func(owner string) (uint64, error)) (e Entry, found bool, ignored int, err error) {
	var at uint64 // the revision e was written at
	// releasedAt is the revision of the release of e's owner that came
	// after e was written; 0 if none (or e is final).
	releasedAt := func(e Entry, at uint64) (uint64, error) {
		if e.State == Final {
			return 0, nil
		}
		r, err := released(e.Owner)
		if err != nil || r <= at {
			return 0, err
		}
		return r, nil
	}
	for _, r := range revs {
		s, ok, err := judge(k, r, t, fetch)
		if err != nil {
			return Entry{}, false, ignored, err
		}
		if ok && found && !next(e, s.Entry) {
			// A takeover the rules do not allow may follow the release of
			// the owner, never precede it.
			rel, err := releasedAt(e, at)
			if err != nil {
				return Entry{}, false, ignored, err
			}
			ok = rel > 0 && r.seq > rel
		}
		if !ok {
			ignored++
			continue
		}
		e, found, at = s.Entry, true, r.seq
	}
	if found {
		rel, err := releasedAt(e, at)
		if err != nil {
			return Entry{}, false, ignored, err
		}
		e.Released = rel > 0
	}
	if len(revs) > 0 {
		e.Revision = revs[len(revs)-1].seq
	}
	return e, found, ignored, nil
}

// judge decodes r and checks its signature; false: r does not count.
func judge(k string, r revision, t *trust, fetch func(owner, id string) ([]byte, error)) (Sealed, bool, error) {
	if r.marker {
		return Sealed{}, false, nil
	}
	s, err := Decode(r.value)
	if err != nil || s.Key != k {
		return Sealed{}, false, nil
	}
	if t == nil {
		return s, true, nil
	}
	if len(s.Sig) == 0 || s.CertID == "" {
		return Sealed{}, false, nil
	}
	owner := s.Entry.Owner
	pub, err := t.key(owner, s.CertID, func() ([]byte, error) { return fetch(owner, s.CertID) })
	switch {
	case errors.Is(err, ErrUnavailable):
		return Sealed{}, false, err
	case err != nil:
		// Not the owner's certificate, not the CA's, or none: a cell puts
		// its certificate in the bucket's stream before the first entry it
		// signs with it, so a replica that holds an entry holds its
		// certificate too (see publish for how long).
		return Sealed{}, false, nil
	}
	return s, verifySig(pub, k, s.Payload, s.Sig), nil
}

// next reports whether entry to may follow entry from.
func next(from, to Entry) bool {
	switch {
	case from.State == Final:
		return false
	case to.Owner == from.Owner:
		return true
	}
	return from.MayTakeOver(to.Call, to.Attempt)
}
