package opennebula

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Hook is one hook of oned's hook pool, as doctor reads it: the
// attributes of its template that say what runs and when (Hook::_to_xml,
// src/hm/Hook.cc:60-90 of release-7.4.0).
type Hook struct {
	ID      int
	Name    string
	Type    string // "state", "api"
	Command string // TEMPLATE/COMMAND, relative to remotes/hooks unless absolute
	On      string // TEMPLATE/ON, which oned drops from a VM state hook
	// State and LCMState are TEMPLATE/STATE and LCM_STATE: a VM state
	// hook's condition as oned keeps it, ON = PROLOG too (ACTIVE, PROLOG;
	// HookStateVM.cc:79-145 of release-7.4.0 and 6.10.5).
	State, LCMState string
}

// Hooks returns every hook of the pool, read with one.hookpool.info (all
// hooks the user may see, the whole range: "A:siii", HookXRPC.h:163-175 of
// release-7.4.0, RequestManagerPoolInfoFilter.cc:1032-1040 of 6.10.5).
//
// Similar To: onehook list -x
func (c *Client) Hooks(ctx context.Context) ([]Hook, error) {
	body, err := c.callString(ctx, "one.hookpool.info", -2, -1, -1)
	if err != nil {
		return nil, err
	}
	return parseHookPool([]byte(body))
}

func parseHookPool(doc []byte) ([]Hook, error) {
	pool, err := parseXMLTree(doc, "HOOK_POOL")
	if err != nil {
		return nil, &Error{Method: "one.hookpool.info", Err: err, kind: ErrProtocol}
	}
	var out []Hook
	for _, n := range pool.children("HOOK") {
		idn := n.child("ID")
		if idn == nil {
			return nil, &Error{Method: "one.hookpool.info", Err: fmt.Errorf("a HOOK without ID"), kind: ErrProtocol}
		}
		id, err := strconv.Atoi(strings.TrimSpace(idn.text))
		if err != nil {
			return nil, &Error{Method: "one.hookpool.info", Err: fmt.Errorf("HOOK ID %q: not a number", strings.TrimSpace(idn.text)), kind: ErrProtocol}
		}
		h := Hook{ID: id, Name: text(n.child("NAME")), Type: text(n.child("TYPE"))}
		if t := n.child("TEMPLATE"); t != nil {
			h.Command, h.On = text(t.child("COMMAND")), text(t.child("ON"))
			h.State, h.LCMState = text(t.child("STATE")), text(t.child("LCM_STATE"))
		}
		out = append(out, h)
	}
	return out, nil
}

// text is n's trimmed text ("" for no node).
func text(n *xnode) string {
	if n == nil {
		return ""
	}
	return strings.TrimSpace(n.text)
}
