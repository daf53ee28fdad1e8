// A LangChain.js RAG app with no ragaudit code: a sender for ragaudit worker's tests.
//
// Tracing as @arizeai/openinference-instrumentation-langchain's README sets it up (a NodeTracerProvider
// with an OTLP/HTTP protobuf exporter, then manuallyInstrument(CallbackManagerModule)); the chain is the
// LCEL retrieval chain of LangChain.js's RAG tutorial (js.langchain.com, "Build a Retrieval Augmented
// Generation (RAG) App": retriever -> formatted context, prompt, ChatOpenAI, StringOutputParser) with a
// custom retriever as the "How to write a custom retriever class" guide writes one. ChatOpenAI talks to
// the loopback chat-completions server (OPENAI_BASE_URL). The OTLP endpoint comes from
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; KB_PATH is a JSON file of [id, text, metadata] documents.
//
// Usage: node --import tsx app.ts QUESTION...   (prints one JSON line per question: question, answer, ids)
import { readFileSync } from "node:fs";

import { LangChainInstrumentation } from "@arizeai/openinference-instrumentation-langchain";
import * as CallbackManagerModule from "@langchain/core/callbacks/manager";
import { awaitAllCallbacks } from "@langchain/core/callbacks/promises";
import { Document } from "@langchain/core/documents";
import { StringOutputParser } from "@langchain/core/output_parsers";
import { ChatPromptTemplate } from "@langchain/core/prompts";
import { BaseRetriever } from "@langchain/core/retrievers";
import { RunnablePassthrough, RunnableSequence } from "@langchain/core/runnables";
import { ChatOpenAI } from "@langchain/openai";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

const provider = new NodeTracerProvider({
  resource: resourceFromAttributes({ "service.name": "lcjs-rag-app" }),
  spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
});
provider.register();
new LangChainInstrumentation().manuallyInstrument(CallbackManagerModule);

type Row = [string, string, Record<string, string>];
const KB: Row[] = JSON.parse(readFileSync(process.env.KB_PATH ?? "kb.json", "utf8"));
const STOP = new Set("a an the of to and or in on for is are what about how do does tell me my i".split(" "));
const words = (text: string): Set<string> =>
  new Set((text.toLowerCase().match(/[a-z0-9]+/g) ?? []).filter((w) => !STOP.has(w)));

class KeywordRetriever extends BaseRetriever {
  lc_namespace = ["tests", "retrievers"];
  k = 2;

  async _getRelevantDocuments(query: string): Promise<Document[]> {
    const q = words(query);
    return KB.map(([id, text, metadata], i) => ({ id, text, metadata, i, score: [...words(text)].filter((w) => q.has(w)).length }))
      .filter((d) => d.score > 0)
      .sort((a, b) => b.score - a.score || a.i - b.i)
      .slice(0, this.k)
      .map((d) => new Document({ id: d.id, pageContent: d.text, metadata: d.metadata }));
  }
}

const retriever = new KeywordRetriever();
const prompt = ChatPromptTemplate.fromMessages([["human", "Context:\n{context}\n\nQuestion: {question}"]]);
const llm = new ChatOpenAI({ model: "gpt-4o-mini", temperature: 0, configuration: { baseURL: process.env.OPENAI_BASE_URL } });
const formatDocs = (docs: Document[]): string => docs.map((d) => d.pageContent).join("\n\n");
const chain = RunnableSequence.from([
  { context: retriever.pipe(formatDocs), question: new RunnablePassthrough() },
  prompt,
  llm,
  new StringOutputParser(),
]);

for (const question of process.argv.slice(2)) {
  const ids = (await retriever._getRelevantDocuments(question)).map((d) => d.id);
  const answer = await chain.invoke(question);
  console.log(JSON.stringify({ question, answer, ids }));
}
// LangChain.js runs callbacks in the background: wait for them (its docs say so for short-lived
// processes), or the root run's span may end after the exporter shut down.
await awaitAllCallbacks();
await provider.shutdown();
