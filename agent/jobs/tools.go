package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/affido/affido/agent/durable"
)

// Tools returns schedule_job, list_jobs and cancel_job. schedule_job always
// asks the owner: a job runs a prompt again and again with nobody watching,
// so no rule may let the model create one by itself.
func Tools() []durable.Tool {
	return []durable.Tool{
		{
			Name: "schedule_job",
			Description: "Schedule a prompt to run on a cron schedule (five fields: minute hour day-of-month month day-of-week, " +
				"or @hourly, @daily) in a time zone (tz, e.g. Europe/Paris; default UTC). The owner approves every job.",
			Parameters: durable.Schema(`"cron":{"type":"string"},"tz":{"type":"string"},"prompt":{"type":"string"},"name":{"type":"string"}`, "cron", "prompt"),
			AlwaysAsk:  true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				var s Spec
				if err := json.Unmarshal(args, &s); err != nil {
					return durable.ToolResult{}, fmt.Errorf("invalid arguments: %w", err)
				}
				origin, err := durable.RunInput(ctx, c.Store, c.RunID)
				if err != nil {
					return durable.ToolResult{}, err
				}
				t, err := newJob(ctx, c.Store, 0, checkpoint{Spec: s, From: origin.From, Hops: origin.Hops}, c.Now)
				if err != nil {
					return durable.ToolResult{}, err
				}
				return durable.ToolResult{Output: fmt.Sprintf("Job scheduled (%s in %s), first run at %s: %s",
					s.Cron, cmpZone(s.TZ), t.Deadline.Format(time.RFC3339), s.Prompt), Tasks: []durable.Task{t}}, nil
			},
		},
		{
			Name:        "list_jobs",
			Description: "List the scheduled jobs with their next run.",
			Parameters:  durable.Schema(""),
			Safe:        true,
			ReadOnly:    true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, _ json.RawMessage) (durable.ToolResult, error) {
				list, err := List(ctx, c.Store)
				if err != nil {
					return durable.ToolResult{}, err
				}
				if len(list) == 0 {
					return durable.ToolResult{Output: "no scheduled jobs"}, nil
				}
				var b strings.Builder
				b.WriteString("id\tcron\ttz\tstate\tnext\tprompt\n")
				for _, j := range list {
					next := "-"
					if j.Next != nil {
						next = j.Next.Format(time.RFC3339)
					}
					fmt.Fprintf(&b, "%d\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Cron, j.TZ, j.State, next, j.Prompt)
				}
				return durable.ToolResult{Output: b.String()}, nil
			},
		},
		{
			Name:        "cancel_job",
			Description: "Cancel a scheduled job by its id (from list_jobs).",
			Parameters:  durable.Schema(`"id":{"type":"string"}`, "id"),
			// Its one effect, the update, is committed with its result: run
			// again, it cancels what is stored then.
			Safe: true,
			Execute: func(ctx context.Context, c durable.ToolCallContext, args json.RawMessage) (durable.ToolResult, error) {
				id, err := durable.IDArgument(args, "a job id from list_jobs")
				if err != nil {
					return durable.ToolResult{}, err
				}
				t, j, err := Get(ctx, c.Store, id)
				if err != nil {
					return durable.ToolResult{}, err
				}
				return durable.ToolResult{Output: fmt.Sprintf("cancelled job %d (%s): %s", id, j.Cron, j.Prompt),
					Updates: []durable.TaskUpdate{{Read: t, Write: Cancelled(t, c.Now)}}}, nil
			},
		},
	}
}

func cmpZone(tz string) string {
	if tz == "" {
		return "UTC"
	}
	return tz
}
