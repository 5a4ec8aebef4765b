package main

import (
	"context"
	"errors"
	"fmt"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// sdk exercises the gateway at base with the official OpenAI Go SDK, the
// way a program in the sandbox holding token would, and prints one line per
// call: "models N", "plain TEXT", "stream TEXT", "tool NAME", "refused CODE MESSAGE"
// (or "<what> error ...").
func sdk(base, token string) {
	c := oai.NewClient(option.WithBaseURL(base), option.WithAPIKey(token), option.WithMaxRetries(0))
	ctx := context.Background()
	user := func(text string) []oai.ChatCompletionMessageParamUnion {
		return []oai.ChatCompletionMessageParamUnion{oai.UserMessage(text)}
	}
	if page, err := c.Models.List(ctx); err != nil {
		fmt.Println("models error", err)
	} else {
		fmt.Println("models", len(page.Data))
	}
	if r, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "fake/echo", Messages: user("hello sdk")}); err != nil || len(r.Choices) == 0 {
		fmt.Println("plain error", err)
	} else {
		fmt.Println("plain", r.Choices[0].Message.Content)
	}
	stream := c.Chat.Completions.NewStreaming(ctx, oai.ChatCompletionNewParams{Model: "fake/echo", Messages: user("streamed")})
	var acc oai.ChatCompletionAccumulator
	for stream.Next() {
		acc.AddChunk(stream.Current())
	}
	if err := stream.Err(); err != nil || len(acc.Choices) == 0 {
		fmt.Println("stream error", err)
	} else {
		fmt.Println("stream", acc.Choices[0].Message.Content)
	}
	tools := []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
		Name: "read_file", Parameters: shared.FunctionParameters{"type": "object"}})}
	if r, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "fake/echo", Messages: user("read notes.txt"), Tools: tools}); err != nil || len(r.Choices) == 0 || len(r.Choices[0].Message.ToolCalls) == 0 {
		fmt.Println("tool error", err)
	} else {
		fmt.Println("tool", r.Choices[0].Message.ToolCalls[0].Function.Name)
	}
	_, err := c.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{Model: "not-served", Messages: user("x")})
	var apiErr *oai.Error
	if errors.As(err, &apiErr) {
		fmt.Println("refused", apiErr.StatusCode, apiErr.Message)
	} else {
		fmt.Println("refused error", err)
	}
}
