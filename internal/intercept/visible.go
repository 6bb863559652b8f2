package intercept

import (
	"context"
	"strings"

	"github.com/trellis-proxy/trellis-proxy/pgerr"
)

// Calls the proxy answers itself read the catalog as the workers' role, so
// each one scopes its answer to the transforms the caller may see: those
// trellis.status shows her on her own backend (SELECT on the target, or
// pg_monitor). A transform she may not see does not exist for her.

// visibleTransforms returns the bare and qualified target names of every
// transform the caller may see.
func (x *execution) visibleTransforms(ctx context.Context) (map[string]bool, error) {
	res, err := x.up.Query(ctx, "SELECT target, target_table FROM "+quoteIdent(x.i.cfg.Schema)+".status")
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, 2*len(res.Rows))
	for _, r := range res.Rows {
		for _, v := range r {
			if v != nil {
				out[string(v)] = true
			}
		}
	}
	return out, nil
}

// refuseInvisibleTransform answers await_live of a transform the caller may
// not see exactly as for one that does not exist.
func (x *execution) refuseInvisibleTransform(ctx context.Context, target string) error {
	seen, err := x.visibleTransforms(ctx)
	if err != nil {
		return err
	}
	if seen[target] {
		return nil
	}
	return pgerr.Newf(pgerr.UndefinedObject, "transform %s does not exist", target).WithClass("not_found", "TransformNotFound").
		WithHint("trellis.status lists the transforms you may see")
}

// scopeMetricsText drops the series labelled with a transform the caller may
// not see; instance-wide series stay (counts, not names).
func (x *execution) scopeMetricsText(ctx context.Context, text string) (string, error) {
	if !strings.Contains(text, `transform="`) {
		return text, nil
	}
	seen, err := x.visibleTransforms(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for line := range strings.Lines(text) {
		if name, ok := transformLabel(line); ok && !seen[name] {
			continue
		}
		b.WriteString(line)
	}
	return b.String(), nil
}

// transformLabel is the transform label's value of a text-format sample.
func transformLabel(line string) (string, bool) {
	if strings.HasPrefix(line, "#") {
		return "", false
	}
	_, rest, ok := strings.Cut(line, `transform="`)
	if !ok {
		return "", false
	}
	var b strings.Builder
	for i := 0; i < len(rest); i++ {
		switch c := rest[i]; c {
		case '\\':
			if i+1 < len(rest) {
				i++
				switch rest[i] {
				case 'n':
					b.WriteByte('\n')
				default:
					b.WriteByte(rest[i])
				}
			}
		case '"':
			return b.String(), true
		default:
			b.WriteByte(c)
		}
	}
	return "", false
}
